package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/fetch"
	"github.com/mediaship/engine/integrity"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

const verifyUsage = `Usage: engine verify URL|FILE... [--manifest FILE|URL] [--sha256 HEX] [--protocol h1|h2|h3] [-k]
                     [--cacert FILE] [--resolve HOST:PORT:ADDR] [--wait D] [--range A-B]

Downloads each URL, counting and hashing the body as it streams (no
temporary file, nothing held in memory), and checks its length against
Content-Length and its BLAKE3 digest against the manifest (by the URL's
path) or else the response's Repr-Digest; a sha-256 member of Repr-Digest
is checked too. A local FILE is hashed and checked against the manifest
(by its path from the manifest's directory, or its name). --sha256 checks
the SHA-256 of the one URL or FILE given.

A digest taken from the server's own Repr-Digest proves the bytes were
not damaged in transit, not that the server is honest; the output says
which digest each check used. A server that links BLAKE3 trees (the
engine) but has not hashed a file yet is asked again for up to --wait,
then reported as NOT HASHED YET, never as FAIL.

One line per URL or file. Exit status: 0 all verified; 1 any FAILED;
3 none failed but some could not be verified (no digest, or not hashed
yet); 2 usage. --range A-B checks that slice against the same slice of
the local file beside a local --manifest.
`

func verifyCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifest := fs.String("manifest", "", "b3sum manifest (file or URL) with the expected digests")
	proto := fs.String("protocol", "h1", "HTTP version: h1, h2 (TLS) or h3 (QUIC)")
	insecure := fs.Bool("k", false, "accept any TLS certificate")
	cacert := fs.String("cacert", "", "trust the CA certificates in this PEM file (servers under test)")
	resolve := fs.String("resolve", "", "connect to ADDR for HOST:PORT (HOST:PORT:ADDR, as curl's --resolve)")
	shaHex := fs.String("sha256", "", "the SHA-256 (64 hex digits) of the one URL or FILE")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for a server that links trees to hash a file")
	rng := fs.String("range", "", "verify only bytes A-B (needs a local --manifest and the file beside it)")
	timeout := fs.Duration("timeout", 0, "give up on a URL after this long (default: no limit)")
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage, "\nflags:\n"); fs.PrintDefaults() }
	targets, err := parseMixed(fs, args)
	if err != nil {
		return 2
	}
	if len(targets) == 0 {
		fs.Usage()
		return 2
	}
	opts := clientOptions{proto: *proto, insecure: *insecure, cacert: *cacert, resolve: *resolve, timeout: *timeout}
	client, err := opts.client()
	if err != nil {
		fmt.Fprintf(stderr, "engine verify: %v\n", err)
		return 2
	}
	var sha *integrity.SHA256
	if *shaHex != "" {
		s, err := integrity.ParseSHA256Hex(strings.ToLower(*shaHex))
		if err != nil || len(targets) != 1 {
			fmt.Fprintf(stderr, "engine verify: --sha256 takes 64 hex digits, for one URL or FILE\n")
			return 2
		}
		sha = &s
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
	failed, unverified := 0, 0
	for _, u := range targets {
		var res verifyResult
		if isURL(u) {
			res = verifyOne(client, *proto, u, sums, localDir, first, last, sha, *wait)
		} else {
			res = verifyLocal(u, sums, localDir, *manifest, sha)
		}
		switch {
		case errors.Is(res.err, errNoDigest), errors.Is(res.err, errNotHashed):
			unverified++
			label := "NOT VERIFIED"
			if errors.Is(res.err, errNotHashed) {
				label = "NOT HASHED YET"
			}
			fmt.Fprintf(stdout, "%s  %s: %v\n", label, u, res.err)
		case res.err != nil:
			failed++
			fmt.Fprintf(stdout, "FAIL  %s: %v\n", u, res.err)
		default:
			fmt.Fprintf(stdout, "OK    %s  %d bytes  blake3 %s (%s)\n", u, res.n, res.sum, res.against)
		}
	}
	switch {
	case failed > 0:
		fmt.Fprintf(stdout, "%d of %d FAILED\n", failed, len(targets))
		return 1
	case unverified > 0:
		fmt.Fprintf(stdout, "%d of %d could not be verified\n", unverified, len(targets))
		return 3
	}
	return 0
}

func isURL(s string) bool { return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") }

// Named failures, one per way a download can be wrong.
var (
	errStatus      = errors.New("unexpected status")
	errNoDigest    = errors.New("no digest to check against: no manifest entry and no Repr-Digest")
	errNotHashed   = errors.New("the server links BLAKE3 trees but sent no Repr-Digest yet: it has not hashed the file")
	errBadHeader   = errors.New("malformed Repr-Digest")
	errNoLength    = errors.New("no Content-Length to check the length against")
	errWrongProto  = errors.New("server did not speak the requested protocol")
	errNoLocalFile = errors.New("the local file for the range is missing")
	errSHA256      = errors.New("SHA-256 mismatch")
)

// serverDigest names a digest taken from the server that sent the bytes.
const serverDigest = "the server's Repr-Digest: integrity in transit, not authenticity"

type verifyResult struct {
	n       int64
	sum     integrity.Digest
	against string
	err     error
}

// clientOptions build the HTTP client of verify (and fetch).
type clientOptions struct {
	proto    string
	insecure bool
	cacert   string
	resolve  string // HOST:PORT:ADDR
	timeout  time.Duration
}

func (o clientOptions) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{InsecureSkipVerify: o.insecure}
	if o.cacert != "" {
		pem, err := os.ReadFile(o.cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", o.cacert)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// target maps an address to the --resolve one.
func (o clientOptions) target() (func(string) string, error) {
	if o.resolve == "" {
		return func(a string) string { return a }, nil
	}
	i := strings.LastIndex(o.resolve, ":")
	j := strings.LastIndex(o.resolve[:max(i, 0)], ":")
	if i < 0 || j < 0 {
		return nil, fmt.Errorf("--resolve %q: expected HOST:PORT:ADDR", o.resolve)
	}
	from, to := o.resolve[:i], o.resolve[i+1:]
	port := o.resolve[j+1 : i]
	if strings.HasPrefix(to, "[") && strings.HasSuffix(to, "]") {
		to = to[1 : len(to)-1]
	}
	if net.ParseIP(to) == nil {
		return nil, fmt.Errorf("--resolve %q: %q is not an IP address", o.resolve, to)
	}
	to = net.JoinHostPort(to, port)
	return func(a string) string {
		if a == from {
			return to
		}
		return a
	}, nil
}

func (o clientOptions) client() (*http.Client, error) {
	tc, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	target, err := o.target()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	tr := &http.Transport{TLSClientConfig: tc, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, target(addr))
		}}
	switch o.proto {
	case "h1":
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no HTTP/2
	case "h2":
		tr.ForceAttemptHTTP2 = true
	case "h3":
		h3 := &http3.Transport{TLSClientConfig: tc, DisableCompression: true,
			Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				return quic.DialAddrEarly(ctx, target(addr), tlsCfg, cfg)
			}}
		return &http.Client{Transport: h3, Timeout: o.timeout}, nil
	default:
		return nil, fmt.Errorf("--protocol %q: expected h1, h2 or h3", o.proto)
	}
	return &http.Client{Transport: tr, Timeout: o.timeout}, nil
}

func verifyClient(proto string, insecure bool, timeout time.Duration) (*http.Client, error) {
	return clientOptions{proto: proto, insecure: insecure, timeout: timeout}.client()
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

func verifyOne(c *http.Client, proto, raw string, sums map[string]integrity.Digest, localDir string, first, last int64, sha *integrity.SHA256, wait time.Duration) verifyResult {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return verifyResult{err: fmt.Errorf("not an http(s) URL")}
	}
	rel := strings.TrimPrefix(path.Clean("/"+u.Path), "/")
	want, inManifest := sums[rel]
	get := func(rg string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", raw, nil)
		if rg != "" {
			req.Header.Set("Range", rg)
		}
		return c.Do(req)
	}
	wantStatus, rg := 200, ""
	if first >= 0 {
		rg, wantStatus = fmt.Sprintf("bytes=%d-%d", first, last), 206
	}
	resp, err := get(rg)
	if err != nil {
		return verifyResult{err: fmt.Errorf("request: %w", err)}
	}
	defer func() { resp.Body.Close() }()
	if resp.StatusCode != wantStatus {
		return verifyResult{err: fmt.Errorf("%w %d (want %d)", errStatus, resp.StatusCode, wantStatus)}
	}
	if proto == "h2" && resp.ProtoMajor != 2 || proto == "h3" && resp.ProtoMajor != 3 {
		return verifyResult{err: fmt.Errorf("%w: got %s", errWrongProto, resp.Proto)}
	}
	if first < 0 && !inManifest && resp.Header.Get("Repr-Digest") == "" && linksTree(resp) {
		// The engine hashes a file on its first request: ask for the
		// first byte until the digest comes, then for the whole file.
		resp.Body.Close()
		hashed := false
		for deadline := time.Now().Add(wait); !hashed && time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if r, err := get("bytes=0-0"); err == nil {
				io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
				r.Body.Close()
				hashed = r.Header.Get("Repr-Digest") != ""
			}
		}
		if !hashed {
			return verifyResult{err: fmt.Errorf("%w (asked for %v)", errNotHashed, wait)}
		}
		if resp, err = get(""); err != nil {
			return verifyResult{err: fmt.Errorf("request: %w", err)}
		}
		if resp.StatusCode != 200 {
			return verifyResult{err: fmt.Errorf("%w %d (want 200)", errStatus, resp.StatusCode)}
		}
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
		wantPtr, against = &d, serverDigest
	}
	if resp.ContentLength < 0 {
		return verifyResult{err: errNoLength}
	}
	// A sha-256 member of the server's Repr-Digest, or --sha256, is
	// checked from the same read.
	wantSHA := sha
	if wantSHA == nil && first < 0 {
		wantSHA = serverSHA256(resp.Header.Get("Repr-Digest"))
	}
	h := sha256.New()
	var body io.Reader = resp.Body
	if wantSHA != nil {
		body = io.TeeReader(body, h)
	}
	vr := integrity.NewReader(body, resp.ContentLength, wantPtr)
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(io.Discard, vr, buf); err != nil {
		return verifyResult{n: vr.N(), err: err}
	}
	if wantSHA != nil {
		if err := checkSHA(h, *wantSHA); err != nil {
			return verifyResult{n: vr.N(), err: err}
		}
		against += ", and sha-256"
	}
	return verifyResult{n: vr.N(), sum: vr.Sum(), against: against}
}

// linksTree reports whether a response links a BLAKE3 tree: a server
// that makes them (the engine) sends the digest once it has hashed.
func linksTree(resp *http.Response) bool {
	return fetch.OutboardLink(resp.Header.Values("Link")) != ""
}

// serverSHA256 is the sha-256 member of a Repr-Digest field, if any.
func serverSHA256(v string) *integrity.SHA256 {
	s, err := integrity.ParseSHA256HeaderValue(v)
	if err != nil {
		return nil
	}
	return &s
}

func checkSHA(h hash.Hash, want integrity.SHA256) error {
	var got integrity.SHA256
	h.Sum(got[:0])
	if got != want {
		return fmt.Errorf("%w: got %s, want %s", errSHA256, got, want)
	}
	return nil
}

// verifyLocal hashes a local file and checks it against the manifest:
// by its path from the manifest's directory, else by its name when one
// entry has it.
func verifyLocal(p string, sums map[string]integrity.Digest, manifestDir, manifest string, sha *integrity.SHA256) verifyResult {
	if sums == nil && sha == nil {
		return verifyResult{err: fmt.Errorf("%w: a local file is checked against --manifest (or --sha256)", errNoDigest)}
	}
	want, found, name := integrity.Digest{}, false, ""
	if sums != nil {
		if manifestDir != "" {
			if abs, err := filepath.Abs(p); err == nil {
				if dir, err := filepath.Abs(manifestDir); err == nil {
					if rel, err := filepath.Rel(dir, abs); err == nil {
						name = filepath.ToSlash(rel)
						want, found = sums[name]
					}
				}
			}
		}
		if !found {
			want, name, found = manifestEntry(sums, filepath.ToSlash(p))
		}
		if !found && sha == nil {
			return verifyResult{err: fmt.Errorf("%w: %s lists no %s", errNoDigest, manifest, p)}
		}
	}
	f, err := os.Open(p)
	if err != nil {
		return verifyResult{err: err}
	}
	defer f.Close()
	h := sha256.New()
	var r io.Reader = f
	if sha != nil {
		r = io.TeeReader(f, h)
	}
	got, n, err := integrity.Sum(r)
	if err != nil {
		return verifyResult{n: n, err: err}
	}
	against := []string{}
	if found {
		if got != want {
			return verifyResult{n: n, sum: got, err: fmt.Errorf("%w: got %s, manifest %s says %s for %s", integrity.ErrMismatch, got, manifest, want, name)}
		}
		against = append(against, "manifest "+manifest)
	}
	if sha != nil {
		if err := checkSHA(h, *sha); err != nil {
			return verifyResult{n: n, sum: got, err: err}
		}
		against = append(against, "sha-256")
	}
	return verifyResult{n: n, sum: got, against: strings.Join(against, ", and ")}
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
