package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaship/engine/fetch"
	"github.com/mediaship/engine/integrity"
)

const fetchUsage = `Usage: engine fetch URL [--mirror URL]... [-o PATH] [--connections N] [--protocol h1|h2|h3]
                    [--digest HEX | --manifest FILE|URL] [--sha256 HEX] [--resume] [-k]
                    [--cacert FILE] [--resolve HOST:PORT:ADDR] [--timeout D] [--json]

Downloads one file in ranges over N connections (spread over the URL and
its mirrors) and checks every 256 KiB chunk group against the file's BLAKE3
outboard tree as it lands, before writing it into PATH.part. A group that
fails is fetched again (from another source when there is one); a source
that keeps sending wrong bytes, answers a range with the whole file, a
wrong Content-Range or a short body, or stalls, is dropped and named. Only
a file whose every group checked is renamed to PATH.

The digest it checks against comes from --digest, from --manifest (a b3sum
manifest, looked up by the URL's path), or else from the server's
Repr-Digest, which proves the bytes were not damaged in transit but not
that the server is honest: the output says which it trusted. The tree is
the one the server links (Link rel="blake3-outboard") or URL.obao (engine
serves both; engine digest --outboard writes them for other servers).
--sha256 HEX also checks the whole file's SHA-256 (as Hugging Face,
GitHub releases and distributions publish it) once every group checked,
before the file is put in place: one more read of it.

--resume continues PATH.part after an interruption, even a kill -9:
groups recorded in PATH.part.state are not checked again, groups written
but not recorded are checked again from PATH.part, and only the rest is
fetched. Exit status: 0 verified, 1 could not verify (no digest, no tree
that matches it, or bytes that kept failing their check), 2 usage or a
local error (disk), 3 network (no source could deliver).
`

// mirrors collects --mirror, which may be given several times.
type mirrors []string

func (m *mirrors) String() string     { return strings.Join(*m, ",") }
func (m *mirrors) Set(v string) error { *m = append(*m, v); return nil }

func fetchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var mirror mirrors
	fs.Var(&mirror, "mirror", "another server of the same file (repeat for more)")
	out := fs.String("o", "", "where to put the file (default: the URL's last path segment, here)")
	conns := fs.Int("connections", 8, "ranges fetched at once, spread over the sources")
	proto := fs.String("protocol", "h1", "HTTP version: h1, h2 (TLS) or h3 (QUIC)")
	digest := fs.String("digest", "", "the file's BLAKE3 (64 hex digits) to trust")
	manifest := fs.String("manifest", "", "b3sum manifest (file or URL) to find the file's digest in")
	shaHex := fs.String("sha256", "", "the file's SHA-256 (64 hex digits), checked over the whole file at the end")
	resume := fs.Bool("resume", false, "continue PATH.part from an earlier run")
	insecure := fs.Bool("k", false, "accept any TLS certificate (self-signed test servers)")
	cacert := fs.String("cacert", "", "trust the CA certificates in this PEM file (servers under test)")
	resolve := fs.String("resolve", "", "connect to ADDR for HOST:PORT (HOST:PORT:ADDR, as curl's --resolve)")
	asJSON := fs.Bool("json", false, "print a JSON summary on stdout")
	stall := fs.Duration("timeout", 30*time.Second, "end a request that receives nothing for this long")
	fs.Usage = func() { fmt.Fprint(stderr, fetchUsage, "\nflags:\n"); fs.PrintDefaults() }
	pos, err := parseMixed(fs, args)
	if err != nil {
		return 2
	}
	switch {
	case len(pos) != 1:
		fs.Usage()
		return 2
	case *digest != "" && *manifest != "":
		fmt.Fprintln(stderr, "engine fetch: --digest and --manifest both name the digest to trust: give one")
		return 2
	case *conns < 1 || *conns > 256:
		fmt.Fprintf(stderr, "engine fetch: --connections %d is out of range; expected 1 to 256\n", *conns)
		return 2
	case *stall <= 0:
		fmt.Fprintf(stderr, "engine fetch: --timeout %v: expected a positive duration (a request that receives no group for this long is ended)\n", *stall)
		return 2
	}
	raw := pos[0]
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		fmt.Fprintf(stderr, "engine fetch: %q is not an http(s) URL\n", raw)
		return 2
	}
	for _, m := range mirror {
		if mu, err := url.Parse(m); err != nil || (mu.Scheme != "http" && mu.Scheme != "https") {
			fmt.Fprintf(stderr, "engine fetch: --mirror %q is not an http(s) URL\n", m)
			return 2
		}
	}
	opts := clientOptions{proto: *proto, insecure: *insecure, cacert: *cacert, resolve: *resolve}
	if _, err := opts.client(); err != nil {
		fmt.Fprintf(stderr, "engine fetch: %v\n", err)
		return 2
	}
	newClient := func() *http.Client { c, _ := opts.client(); return c }
	dest := *out
	if dest == "" {
		dest = path.Base(u.Path)
		if dest == "/" || dest == "." || dest == ".." || dest == "" || strings.ContainsAny(dest, `\`) {
			fmt.Fprintf(stderr, "engine fetch: the URL names no file to write here (%q): pass -o PATH\n", dest)
			return 2
		}
	}
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		fmt.Fprintf(stderr, "engine fetch: -o %s is a directory: give the file's path\n", dest)
		return 2
	}
	cfg := fetch.Config{URL: raw, Mirrors: mirror, Path: dest, Connections: *conns, NewClient: newClient, Resume: *resume, Stall: *stall,
		Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	switch {
	case *digest != "":
		d, err := integrity.ParseHex(strings.ToLower(*digest))
		if err != nil {
			fmt.Fprintf(stderr, "engine fetch: --digest: %v\n", err)
			return 2
		}
		cfg.Digest, cfg.DigestFrom = &d, "--digest on the command line"
	case *manifest != "":
		sums, _, err := loadVerifyManifest(newClient(), *manifest)
		if err != nil {
			fmt.Fprintf(stderr, "engine fetch: %v\n", err)
			return 2
		}
		d, name, ok := manifestEntry(sums, u.Path)
		if !ok {
			fmt.Fprintf(stderr, "engine fetch: %s lists no file for %s\n", *manifest, u.Path)
			return 1
		}
		cfg.Digest, cfg.DigestFrom = &d, fmt.Sprintf("manifest %s (%s)", *manifest, name)
	}
	if *shaHex != "" {
		s, err := integrity.ParseSHA256Hex(strings.ToLower(*shaHex))
		if err != nil {
			fmt.Fprintf(stderr, "engine fetch: --sha256: %v\n", err)
			return 2
		}
		cfg.SHA256 = &s
	}
	bar := newFetchBar(stderr)
	cfg.Progress = bar.update
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := fetch.Run(ctx, cfg)
	bar.finish()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		v := struct {
			*fetch.Result
			Error string `json:"error,omitempty"`
		}{Result: res}
		if err != nil {
			v.Error = err.Error()
		}
		enc.Encode(v)
	}
	summary(stderr, res, err)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fetch.ErrUnverified):
		return 1
	case errors.Is(err, fetch.ErrNetwork):
		return 3
	}
	return 2
}

// manifestEntry finds the digest of the file at urlPath: the entry for
// the whole path, else the one entry whose path ends the URL's.
func manifestEntry(sums map[string]integrity.Digest, urlPath string) (integrity.Digest, string, bool) {
	rel := strings.TrimPrefix(path.Clean("/"+urlPath), "/")
	if d, ok := sums[rel]; ok {
		return d, rel, true
	}
	var found []string
	for p := range sums {
		if strings.HasSuffix("/"+rel, "/"+p) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return integrity.Digest{}, "", false
	}
	return sums[found[0]], found[0], true
}

// summary says how the download ended, in a line or a few.
func summary(w io.Writer, r *fetch.Result, err error) {
	if r == nil {
		return
	}
	if err != nil {
		fmt.Fprintf(w, "FAILED %s: %v\n", r.Path, err)
	} else {
		fmt.Fprintf(w, "VERIFIED %s: %s, every %s group checked against blake3 %s\n", r.Path, human(r.Size), human(r.GroupSize), r.Blake3)
		if r.SHA256 != "" {
			fmt.Fprintf(w, "  and the whole file against sha-256 %s\n", r.SHA256)
		}
	}
	if r.Trusted != "" {
		fmt.Fprintf(w, "  digest trusted from: %s\n", r.Trusted)
	}
	fmt.Fprintf(w, "  %.1f MiB/s over %.2f s; fetched %s, of which not kept %s; %d groups fetched again after a failed check; %d groups resumed, %d checked again from the part file\n",
		r.MiBps, r.Seconds, human(r.Fetched), human(r.Refetched), r.Retried, r.Resumed, r.Rechecked)
	for _, s := range r.Sources {
		state := "served"
		if s.Dropped != "" {
			state = "DROPPED: " + s.Dropped
		}
		fmt.Fprintf(w, "  source %s: %s at %.1f MiB/s, %d wrong groups, %d failures; %s\n", s.URL, human(s.Bytes), s.MiBps, s.WrongGroups, s.Failures, state)
	}
}

// fetchBar draws a progress bar on a terminal; elsewhere it stays quiet.
type fetchBar struct {
	w     io.Writer
	tty   bool
	start time.Time
	mu    sync.Mutex
	drawn bool
}

func newFetchBar(w io.Writer) *fetchBar {
	b := &fetchBar{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		b.tty = isTerminal(f)
	}
	return b
}

func (b *fetchBar) update(p fetch.Progress) {
	if !b.tty {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	frac := 1.0
	if p.Size > 0 {
		frac = float64(p.Bytes) / float64(p.Size)
	}
	const width = 30
	rate := float64(p.Bytes) / max(time.Since(b.start).Seconds(), 1e-9)
	fmt.Fprintf(b.w, "\r[%s%s] %s/%s checked  %s/s  %d sources   ", strings.Repeat("=", int(frac*width)), strings.Repeat(" ", width-int(frac*width)),
		human(p.Bytes), human(p.Size), human(int64(rate)), p.Sources)
	b.drawn = true
}

func (b *fetchBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\n")
	}
}
