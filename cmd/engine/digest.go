package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mediaship/engine/integrity"
)

const digestUsage = `Usage: engine digest [--root DIR] [-o B3SUMS] [--sha256 SHA256SUMS] [--outboard] [--check B3SUMS] [--workers N]

Hashes every regular file below DIR (default .) with BLAKE3, in parallel.
Without -o or --check it prints a manifest in b3sum's format; -o writes it
to a file (left out of the tree); --check compares the tree with a manifest
and exits 1 listing every file that differs, is missing or could not be
read. Files that vanish or change while being hashed are reported.

--outboard also writes each file's BLAKE3 outboard tree beside it, as
FILE.obao (the format in the README, "Verified downloads"), in the same
read: a directory served by nginx or a CDN can then be fetched with every
256 KiB checked as it lands (engine fetch). Files named *.obao are then
sidecars, left out of the manifest and never hashed themselves.

--sha256 FILE also writes every file's SHA-256 to FILE in sha256sum's
format (what Hugging Face, GitHub releases and distributions publish),
from the same read.
`

func digestCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("digest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "directory to hash")
	out := fs.String("o", "", "write the manifest to this file")
	check := fs.String("check", "", "check the tree against this manifest")
	outboard := fs.Bool("outboard", false, "write each file's outboard tree beside it as FILE.obao")
	shaOut := fs.String("sha256", "", "also write a SHA256SUMS manifest (sha256sum's format) to this file")
	workers := fs.Int("workers", 0, "files hashed at once (default: one per CPU)")
	fs.Usage = func() { fmt.Fprint(stderr, digestUsage, "\nflags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || (*out != "" && *check != "") || ((*outboard || *shaOut != "") && *check != "") {
		fs.Usage()
		return 2
	}
	if st, err := os.Stat(*root); err != nil || !st.IsDir() {
		fmt.Fprintf(stderr, "engine digest: %s is not a directory\n", *root)
		return 2
	}
	if *check != "" {
		return digestCheck(*root, *check, *workers, stdout, stderr)
	}
	// The manifests written are left out of the tree.
	leave := map[string]bool{}
	for _, o := range []string{*out, *shaOut} {
		if o == "" {
			continue
		}
		absOut, _ := filepath.Abs(o)
		absRoot, _ := filepath.Abs(*root)
		if rel, err := filepath.Rel(absRoot, absOut); err == nil && !strings.HasPrefix(rel, "..") {
			leave[filepath.ToSlash(rel)] = true
		}
	}
	skip := func(p string) bool { return leave[p] }
	prog := newProgress(stderr)
	start := time.Now()
	entries, errs, err := integrity.HashTree(*root, integrity.TreeOptions{Workers: *workers, Skip: skip, Progress: prog.update, Outboard: *outboard, SHA256: *shaOut != ""})
	prog.finish()
	if err != nil {
		fmt.Fprintf(stderr, "engine digest: %v\n", err)
		return 2
	}
	var w io.Writer = stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "engine digest: %v\n", err)
			return 2
		}
		defer f.Close()
		w = f
	}
	if err := integrity.WriteManifest(w, entries); err != nil {
		fmt.Fprintf(stderr, "engine digest: %v\n", err)
		return 2
	}
	if *shaOut != "" {
		f, err := os.Create(*shaOut)
		if err == nil {
			err = integrity.WriteManifest(f, integrity.SHA256Entries(entries))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "engine digest: %v\n", err)
			return 2
		}
	}
	for _, e := range errs {
		fmt.Fprintf(stderr, "engine digest: %s: %v\n", e.Path, e.Err)
	}
	el := time.Since(start)
	trees := ""
	if *outboard {
		trees = fmt.Sprintf(" (and %d outboard trees)", len(entries))
	}
	fmt.Fprintf(stderr, "engine digest: %d files%s, %s in %v (%s/s)%s\n", len(entries), trees, human(prog.last.Bytes), el.Round(time.Millisecond),
		human(int64(float64(prog.last.Bytes)/max(el.Seconds(), 1e-9))), errSummary(len(errs)))
	if len(errs) > 0 {
		return 1
	}
	return 0
}

func errSummary(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d files could not be hashed", n)
}

// digestCheck compares the tree with a manifest, as b3sum --check does,
// and also names files the manifest lists that are missing.
func digestCheck(root, manifest string, workers int, stdout, stderr io.Writer) int {
	f, err := os.Open(manifest)
	if err != nil {
		fmt.Fprintf(stderr, "engine digest: %v\n", err)
		return 2
	}
	want, err := integrity.ReadManifest(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "engine digest: %s: %v\n", manifest, err)
		return 2
	}
	listed := map[string]integrity.Digest{}
	for _, e := range want {
		listed[e.Path] = e.Digest
	}
	prog := newProgress(stderr)
	got, errs, err := integrity.HashTree(root, integrity.TreeOptions{Workers: workers, Progress: prog.update,
		Skip: func(rel string) bool { _, ok := listed[rel]; return !ok }})
	prog.finish()
	if err != nil {
		fmt.Fprintf(stderr, "engine digest: %v\n", err)
		return 2
	}
	failed := 0
	seen := map[string]bool{}
	for _, e := range got {
		seen[e.Path] = true
		if e.Digest != listed[e.Path] {
			fmt.Fprintf(stdout, "FAILED %s: blake3 %s, manifest says %s\n", e.Path, e.Digest, listed[e.Path])
			failed++
		}
	}
	for _, e := range errs {
		seen[e.Path] = true
		fmt.Fprintf(stdout, "FAILED %s: %v\n", e.Path, e.Err)
		failed++
	}
	for _, e := range want {
		if !seen[e.Path] {
			fmt.Fprintf(stdout, "FAILED %s: missing\n", e.Path)
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d files FAILED\n", failed, len(want))
		return 1
	}
	fmt.Fprintf(stdout, "all %d files match %s\n", len(want), manifest)
	return 0
}

// progress draws a bar on a terminal and prints a plain line every few
// seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time

	mu    sync.Mutex
	last  integrity.Progress
	drawn time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now(), drawn: time.Now()}
	if f, ok := w.(*os.File); ok {
		p.tty = isTerminal(f)
	}
	return p
}

func (p *progress) update(pr integrity.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.Files < p.last.Files {
		return
	}
	p.last = pr
	interval := 5 * time.Second
	if p.tty {
		interval = 100 * time.Millisecond
	}
	if time.Since(p.drawn) < interval && pr.Files < pr.TotalFiles {
		return
	}
	p.drawn = time.Now()
	el := time.Since(p.start).Seconds()
	rate := float64(pr.Bytes) / max(el, 1e-9)
	eta := "?"
	if rate > 0 && pr.TotalBytes >= pr.Bytes {
		eta = (time.Duration(float64(pr.TotalBytes-pr.Bytes)/rate) * time.Second).Round(time.Second).String()
	}
	frac := 1.0
	if pr.TotalBytes > 0 {
		frac = float64(pr.Bytes) / float64(pr.TotalBytes)
	}
	if p.tty {
		const width = 30
		bar := strings.Repeat("=", int(frac*width)) + strings.Repeat(" ", width-int(frac*width))
		fmt.Fprintf(p.w, "\r[%s] %s/%s  %d/%d files  %s/s  ETA %s   ", bar, human(pr.Bytes), human(pr.TotalBytes),
			pr.Files, pr.TotalFiles, human(int64(rate)), eta)
		return
	}
	fmt.Fprintf(p.w, "progress: %s of %s, %d of %d files, %s/s, ETA %s\n", human(pr.Bytes), human(pr.TotalBytes),
		pr.Files, pr.TotalFiles, human(int64(rate)), eta)
}

func (p *progress) finish() {
	if p.tty && !p.drawn.IsZero() {
		fmt.Fprint(p.w, "\n")
	}
}

func human(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if f < 1024 || u == "TiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1024
	}
	return ""
}
