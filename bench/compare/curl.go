package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
// stdout (a pipe into this harness), TLS 1.3 with the suite Go picks.
func curlArgs(r row, url string) []string {
	args := []string{"-sS", "--max-time", "300", "-o", "-", "-w", curlWriteOut}
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

// checkCurl decides whether a transfer counts: curl's report and the
// bytes this harness hashed against the fixture's size and digest.
// reason is "" when it counts.
func checkCurl(r row, c curlReport, body curlBody, size int64, want integrity.Digest) (reason, detail string) {
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
	case c.size != size || body.n != size:
		return "length", fmt.Sprintf("curl counted %d bytes and passed on %d, want %d", c.size, body.n, size)
	case body.digest != want:
		return "digest", fmt.Sprintf("BLAKE3 %s, want %s", body.digest, want)
	case c.total <= c.pretransfer:
		return "timing", fmt.Sprintf("time_total %.6f s not after time_pretransfer %.6f s", c.total, c.pretransfer)
	}
	return "", ""
}

// curl runs one transfer, hashing every byte curl writes as it arrives.
func (x *extRun) curl(ctx context.Context) extSample {
	return curlTransfer(ctx, x.row, x.url.String(), x.size, x.digest)
}

func curlTransfer(ctx context.Context, r row, url string, size int64, want integrity.Digest) extSample {
	ctx, cancel := context.WithTimeout(ctx, 310*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", curlArgs(r, url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return rejected("curl failed", "%v", err)
	}
	if err := cmd.Start(); err != nil {
		return rejected("curl failed", "%v", err)
	}
	h := blake3.New()
	n, copyErr := io.CopyBuffer(h, out, make([]byte, 1<<20))
	waitErr := cmd.Wait()
	var body curlBody
	body.n = n
	h.Sum(body.digest[:0])
	if waitErr != nil {
		return rejected("curl failed", "%v: %s", waitErr, oneLine(stderr.String()))
	}
	if copyErr != nil {
		return rejected("curl failed", "reading its output: %v", copyErr)
	}
	rep, err := parseCurlReport(stderr.String())
	if err != nil {
		return rejected("curl failed", "%v", err)
	}
	if reason, detail := checkCurl(r, rep, body, size, want); reason != "" {
		return rejected(reason, "%s", detail)
	}
	return extSample{value: float64(size) / (1 << 20) / (rep.total - rep.pretransfer), bytes: size, requests: 1}
}
