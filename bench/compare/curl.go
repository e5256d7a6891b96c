package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/integrity"
)

// curlWriteOut is the -w format: to stderr (the body has stdout), one
// line the harness finds by its prefix.
const curlWriteOut = "%{stderr}compare-curl: code=%{http_code} version=%{http_version} size=%{size_download} length=%header{content-length} pretransfer=%{time_pretransfer} total=%{time_total}\\n"

// curlArgs is curl's command line for a row: one transfer, the body to
// out ("-", a pipe into this harness, for the hashed transfer;
// /dev/null for the samples), TLS 1.3 with the suite Go picks.
func curlArgs(r row, url, out string) []string {
	args := []string{"-sS", "--max-time", "300", "-o", out, "-w", curlWriteOut}
	if r.proto == "h2" {
		args = append(args, "--http2")
	} else {
		args = append(args, "--http1.1")
	}
	if r.tls {
		// -k: the certificate is self-signed, as every client here
		// accepts it.
		args = append(args, "-k", "--tlsv1.3", "--tls13-ciphers", "TLS_AES_128_GCM_SHA256")
	}
	return append(args, url)
}

// curlReport is what curl's -w line said about a transfer.
type curlReport struct {
	code, version, length string
	size                  int64
	pretransfer, total    float64 // seconds
}

// parseCurlReport finds the -w line in curl's stderr.
func parseCurlReport(stderr string) (curlReport, error) {
	var c curlReport
	for _, line := range strings.Split(stderr, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "compare-curl: ")
		if !ok {
			continue
		}
		var err error
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "code":
				c.code = v
			case "version":
				c.version = v
			case "length":
				c.length = v
			case "size":
				c.size, err = strconv.ParseInt(v, 10, 64)
			case "pretransfer":
				c.pretransfer, err = strconv.ParseFloat(v, 64)
			case "total":
				c.total, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return c, fmt.Errorf("curl -w: %s: %v", kv, err)
			}
		}
		return c, nil
	}
	return c, fmt.Errorf("curl wrote no -w line")
}

// curlBody is what this harness read from curl's stdout.
type curlBody struct {
	n      int64
	digest integrity.Digest
}

// checkCurl decides whether a transfer counts by curl's report: status
// 200, the row's HTTP version, and the fixture's size as Content-Length
// and as the bytes curl received. reason is "" when it counts.
func checkCurl(r row, c curlReport, size int64) (reason, detail string) {
	wantVersion := "1.1"
	if r.proto == "h2" {
		wantVersion = "2"
	}
	switch {
	case c.code != "200":
		return "status " + c.code, "curl reported status " + c.code
	case c.version != wantVersion:
		return "protocol", fmt.Sprintf("HTTP version %q, want %q", c.version, wantVersion)
	case c.length != strconv.FormatInt(size, 10):
		return "length", fmt.Sprintf("Content-Length %q, want %d", c.length, size)
	case c.size != size:
		return "length", fmt.Sprintf("curl counted %d bytes, want %d", c.size, size)
	case c.total <= c.pretransfer:
		return "timing", fmt.Sprintf("time_total %.6f s not after time_pretransfer %.6f s", c.total, c.pretransfer)
	}
	return "", ""
}

// checkCurlBody decides whether the bytes this harness read from curl in
// the hashed transfer are the fixture: its size and its digest.
func checkCurlBody(body curlBody, size int64, want integrity.Digest) (reason, detail string) {
	switch {
	case body.n != size:
		return "length", fmt.Sprintf("curl passed on %d bytes, want %d", body.n, size)
	case body.digest != want:
		return "digest", fmt.Sprintf("BLAKE3 %s, want %s", body.digest, want)
	}
	return "", ""
}

// curl takes one sample: a transfer curl writes to /dev/null (see
// curlTimed).
func (x *extRun) curl(ctx context.Context) extSample {
	return curlTimed(ctx, x.row, x.url.String(), x.size)
}

// curlHashed is a cell's first transfer, the one whose bytes are checked:
// curl writes the body to a pipe and this harness hashes every byte as it
// arrives; it counts when curl's report passes checkCurl and the bytes
// checkCurlBody. Through the pipe curl is slower than alone (on two
// CPUs this harness's hashing capped one connection near 900 MiB/s), so
// no sample is taken this way.
func curlHashed(ctx context.Context, r row, url string, size int64, want integrity.Digest) extSample {
	var body curlBody
	rep, failed := runCurl(ctx, curlArgs(r, url, "-"), func(out io.Reader) error {
		h := blake3.New()
		var err error
		body.n, err = io.CopyBuffer(h, out, make([]byte, 1<<20))
		h.Sum(body.digest[:0])
		return err
	})
	if failed.reject != "" {
		return failed
	}
	if reason, detail := checkCurl(r, rep, size); reason != "" {
		return rejected(reason, "%s", detail)
	}
	if reason, detail := checkCurlBody(body, size, want); reason != "" {
		return rejected(reason, "%s", detail)
	}
	return curlSample(rep, size)
}

// curlTimed is a sample: curl writes the body to /dev/null, so that the
// client is curl alone, and it counts when curl exited 0 and its report
// passes checkCurl. Its bytes are counted, not hashed: only the cell's
// first transfer, before the samples, was hashed.
func curlTimed(ctx context.Context, r row, url string, size int64) extSample {
	rep, failed := runCurl(ctx, curlArgs(r, url, os.DevNull), nil)
	if failed.reject != "" {
		return failed
	}
	if reason, detail := checkCurl(r, rep, size); reason != "" {
		return rejected(reason, "%s", detail)
	}
	return curlSample(rep, size)
}

// curlSample is an accepted transfer's figure: the file's size over
// curl's time from the request to the last byte (the connection and
// handshake left out).
func curlSample(rep curlReport, size int64) extSample {
	return extSample{value: float64(size) / (1 << 20) / (rep.total - rep.pretransfer), bytes: size, requests: 1}
}

// runCurl runs curl with args, handing its stdout to read when read is
// not nil, and returns its -w report; failed is a rejection when curl did
// not exit 0, read failed or the report is missing.
func runCurl(ctx context.Context, args []string, read func(io.Reader) error) (rep curlReport, failed extSample) {
	ctx, cancel := context.WithTimeout(ctx, 310*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var out io.Reader
	if read != nil {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return rep, rejected("curl failed", "%v", err)
		}
		out = pipe
	}
	if err := cmd.Start(); err != nil {
		return rep, rejected("curl failed", "%v", err)
	}
	var readErr error
	if read != nil {
		readErr = read(out)
	}
	if err := cmd.Wait(); err != nil {
		return rep, rejected("curl failed", "%v: %s", err, oneLine(stderr.String()))
	}
	if readErr != nil {
		return rep, rejected("curl failed", "reading its output: %v", readErr)
	}
	rep, err := parseCurlReport(stderr.String())
	if err != nil {
		return rep, rejected("curl failed", "%v", err)
	}
	return rep, extSample{}
}
