package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/integrity"
	"github.com/quic-go/quic-go/http3"
)

const verifyUsage = `Usage: engine verify URL... [--manifest FILE|URL] [--protocol h1|h2|h3] [-k] [--range A-B]

Downloads each URL, counting and hashing the body as it streams (no
temporary file, nothing held in memory), and checks its length against
Content-Length and its BLAKE3 digest against the manifest (by the URL's
path) or else the response's Repr-Digest. One line per URL; exit 1 if any
failed. --range A-B checks that slice against the same slice of the local
file beside a local --manifest.
`

func verifyCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifest := fs.String("manifest", "", "b3sum manifest (file or URL) with the expected digests")
	proto := fs.String("protocol", "h1", "HTTP version: h1, h2 (TLS) or h3 (QUIC)")
	insecure := fs.Bool("k", false, "accept any TLS certificate")
	rng := fs.String("range", "", "verify only bytes A-B (needs a local --manifest and the file beside it)")
	timeout := fs.Duration("timeout", 0, "give up on a URL after this long (default: no limit)")
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage, "\nflags:\n"); fs.PrintDefaults() }
	urls, err := parseMixed(fs, args)
	if err != nil {
		return 2
	}
	if len(urls) == 0 {
		fs.Usage()
		return 2
	}
	client, err := verifyClient(*proto, *insecure, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "engine verify: %v\n", err)
		return 2
	}
	var sums map[string]integrity.Digest
	localDir := ""
	if *manifest != "" {
		if sums, localDir, err = loadVerifyManifest(client, *manifest); err != nil {
			fmt.Fprintf(stderr, "engine verify: %v\n", err)
			return 2
		}
	}
	var first, last int64 = -1, -1
	if *rng != "" {
		a, b, ok := strings.Cut(*rng, "-")
		first, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			last, err = strconv.ParseInt(b, 10, 64)
		}
		if !ok || err != nil || first < 0 || last < first {
			fmt.Fprintf(stderr, "engine verify: --range %q: expected A-B with 0 <= A <= B\n", *rng)
			return 2
		}
		if localDir == "" {
			fmt.Fprintln(stderr, "engine verify: --range needs a local --manifest: the slice is checked against the file beside it")
			return 2
		}
	}
	failed := 0
	for _, u := range urls {
		res := verifyOne(client, *proto, u, sums, localDir, first, last)
		if res.err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL  %s: %v\n", u, res.err)
			continue
		}
		fmt.Fprintf(stdout, "OK    %s  %d bytes  blake3 %s (%s)\n", u, res.n, res.sum, res.against)
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d FAILED\n", failed, len(urls))
		return 1
	}
	return 0
}

// Named failures, one per way a download can be wrong.
var (
	errStatus      = errors.New("unexpected status")
	errNoDigest    = errors.New("no digest to check against: no manifest entry and no Repr-Digest")
	errBadHeader   = errors.New("malformed Repr-Digest")
	errNoLength    = errors.New("no Content-Length to check the length against")
	errWrongProto  = errors.New("server did not speak the requested protocol")
	errNoLocalFile = errors.New("the local file for the range is missing")
)

type verifyResult struct {
	n       int64
	sum     integrity.Digest
	against string
	err     error
}

func verifyClient(proto string, insecure bool, timeout time.Duration) (*http.Client, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure}, DisableCompression: true}
	switch proto {
	case "h1":
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no HTTP/2
	case "h2":
		tr.ForceAttemptHTTP2 = true
	case "h3":
		h3 := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure}, DisableCompression: true}
		return &http.Client{Transport: h3, Timeout: timeout}, nil
	default:
		return nil, fmt.Errorf("--protocol %q: expected h1, h2 or h3", proto)
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// loadVerifyManifest reads a manifest from a file or a URL. For a file,
// it also returns its directory, where --range finds local copies.
func loadVerifyManifest(c *http.Client, where string) (map[string]integrity.Digest, string, error) {
	var r io.ReadCloser
	dir := ""
	if strings.HasPrefix(where, "http://") || strings.HasPrefix(where, "https://") {
		resp, err := c.Get(where)
		if err != nil {
			return nil, "", fmt.Errorf("manifest %s: %w", where, err)
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			return nil, "", fmt.Errorf("manifest %s: %w %d", where, errStatus, resp.StatusCode)
		}
		r = resp.Body
	} else {
		f, err := os.Open(where)
		if err != nil {
			return nil, "", fmt.Errorf("manifest: %w", err)
		}
		r, dir = f, filepath.Dir(where)
	}
	defer r.Close()
	entries, err := integrity.ReadManifest(r)
	if err != nil {
		return nil, "", fmt.Errorf("manifest %s: %w", where, err)
	}
	m := make(map[string]integrity.Digest, len(entries))
	for _, e := range entries {
		m[e.Path] = e.Digest
	}
	return m, dir, nil
}

func verifyOne(c *http.Client, proto, raw string, sums map[string]integrity.Digest, localDir string, first, last int64) verifyResult {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return verifyResult{err: fmt.Errorf("not an http(s) URL")}
	}
	rel := strings.TrimPrefix(path.Clean("/"+u.Path), "/")
	want, inManifest := sums[rel]
	req, _ := http.NewRequest("GET", raw, nil)
	wantStatus := 200
	if first >= 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", first, last))
		wantStatus = 206
	}
	resp, err := c.Do(req)
	if err != nil {
		return verifyResult{err: fmt.Errorf("request: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus {
		return verifyResult{err: fmt.Errorf("%w %d (want %d)", errStatus, resp.StatusCode, wantStatus)}
	}
	if proto == "h2" && resp.ProtoMajor != 2 || proto == "h3" && resp.ProtoMajor != 3 {
		return verifyResult{err: fmt.Errorf("%w: got %s", errWrongProto, resp.Proto)}
	}
	against := "manifest"
	var wantPtr *integrity.Digest
	switch {
	case first >= 0:
		if !inManifest {
			return verifyResult{err: fmt.Errorf("%w: %q is not in the manifest", errNoLocalFile, rel)}
		}
		f, err := os.Open(filepath.Join(localDir, filepath.FromSlash(rel)))
		if err != nil {
			return verifyResult{err: fmt.Errorf("%w: %v", errNoLocalFile, err)}
		}
		slice, err := integrity.SumRange(f, first, last-first+1)
		f.Close()
		if err != nil {
			return verifyResult{err: fmt.Errorf("%w: %v", errNoLocalFile, err)}
		}
		wantPtr, against = &slice, fmt.Sprintf("bytes %d-%d of the local file", first, last)
	case inManifest:
		wantPtr = &want
	default:
		d, err := parseReprDigest(resp.Header.Get("Repr-Digest"))
		if err != nil {
			return verifyResult{err: err}
		}
		wantPtr, against = &d, "Repr-Digest"
	}
	if resp.ContentLength < 0 {
		return verifyResult{err: errNoLength}
	}
	vr := integrity.NewReader(resp.Body, resp.ContentLength, wantPtr)
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(io.Discard, vr, buf); err != nil {
		return verifyResult{n: vr.N(), err: err}
	}
	return verifyResult{n: vr.N(), sum: vr.Sum(), against: against}
}

// parseReprDigest finds the blake3 member of a Repr-Digest field, in
// verify's words.
func parseReprDigest(v string) (integrity.Digest, error) {
	d, err := integrity.ParseHeaderValue(v)
	switch {
	case err == nil:
		return d, nil
	case v == "":
		return d, errNoDigest
	case errors.Is(err, integrity.ErrBadFieldDigest):
		return d, fmt.Errorf("%w: %q", errBadHeader, v)
	}
	return d, fmt.Errorf("%w (Repr-Digest has no blake3: %q)", errNoDigest, v)
}

// parseMixed parses flags that may come before, between or after the
// positional arguments (URLs), and returns those arguments.
func parseMixed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := args; len(rest) > 0; {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	return pos, nil
}
