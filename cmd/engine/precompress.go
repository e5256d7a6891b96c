package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/precompress"
)

const precompressUsage = `Usage: engine precompress DIR [--codings br,zstd,gzip] [--min-size 1KiB] [--min-saving 5]
                          [-j N] [--dry-run] [--check] [--json]

Writes file.br (brotli 11), file.zst (zstd, best level) and file.gz (gzip 9)
beside every compressible file below DIR (text, JSON, JavaScript, CSS,
SVG, XML, wasm, fonts and icons that are not compressed already; never
images, video, audio, archives or model weights), for precompressed = true
sites. A sidecar is kept only when it saves --min-saving percent; each
gets its file's mtime, and one with the file's mtime is up to date and
left alone, so a second run writes nothing. A stale sidecar that is not
rewritten (the file shrank under --min-size, or no longer compresses) is
removed. Dotfiles, dot directories and symbolic links that leave DIR are
skipped.

--check writes nothing: it lists sidecars whose mtime differs from their
file's (older ones the server skips) and sidecars whose file is gone, and
exits 1 when it finds any. Exit status: 0 done (or clean), 1 some file
failed (or a problem was found, or the run was interrupted), 2 it could
not run.
`

func precompressCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("precompress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	codings := fs.String("codings", "br,zstd,gzip", "sidecars to write or check")
	minSize := fs.String("min-size", "1KiB", "smallest file compressed (0: no floor)")
	minSaving := fs.String("min-saving", "5", "percent a sidecar must save to be kept (0: any saving)")
	workers := fs.Int("j", 0, "files compressed at once (default: one per CPU)")
	fs.IntVar(workers, "workers", 0, "same as -j")
	dryRun := fs.Bool("dry-run", false, "list what would be compressed and removed; write nothing")
	check := fs.Bool("check", false, "report stale and orphaned sidecars; write nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() { fmt.Fprint(stderr, precompressUsage, "\nflags:\n"); fs.PrintDefaults() }
	pos, err := parseMixed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	dir := pos[0]
	var cfg precompress.Config
	if cfg.Codings, err = precompress.ParseCodings(*codings); err != nil {
		fmt.Fprintf(stderr, "engine %v\n", err) // "precompress: ..."
		return 2
	}
	size, err := config.ParseSize(*minSize)
	if err != nil {
		fmt.Fprintf(stderr, "engine precompress: --min-size: %v\n", err)
		return 2
	}
	cfg.MinSize = int64(size)
	if size == 0 {
		cfg.MinSize = -1
	}
	saving, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(*minSaving), "%"), 64)
	if err != nil || saving < 0 || saving >= 100 {
		fmt.Fprintf(stderr, "engine precompress: --min-saving: %q is not a percentage from 0 to below 100\n", *minSaving)
		return 2
	}
	cfg.MinSaving = saving
	if saving == 0 {
		cfg.MinSaving = -1
	}
	cfg.Workers = *workers
	cfg.DryRun = *dryRun

	if *check {
		return precompressCheck(dir, cfg, *asJSON, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prog := newProgress(stderr)
	cfg.Progress = func(p precompress.Progress) { prog.update(integrity.Progress(p)) }
	rep, err := precompress.Run(ctx, dir, cfg)
	prog.finish()
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		fmt.Fprintf(stderr, "engine %v\n", err) // "precompress: ..."
		return 2
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(stderr, "engine precompress: %v\n", e)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			*precompress.Report
			Interrupted bool `json:"interrupted,omitempty"`
		}{rep, interrupted})
	} else {
		for _, p := range rep.Planned {
			if !strings.HasPrefix(p, "remove ") {
				p = "compress " + p
			}
			fmt.Fprintln(stdout, p)
		}
	}
	fmt.Fprintln(stderr, precompressSummary(rep, cfg, interrupted))
	if interrupted || len(rep.Errors) > 0 {
		return 1
	}
	return 0
}

// precompressSummary is the run's last line.
func precompressSummary(r *precompress.Report, cfg precompress.Config, interrupted bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine precompress: %d files, %d compressible", r.Files, r.Compressible)
	if r.TooSmall > 0 {
		fmt.Fprintf(&b, " (%d too small)", r.TooSmall)
	}
	if cfg.DryRun {
		fmt.Fprintf(&b, "; dry run: %d sidecars to compress, %d up to date", len(r.Planned), r.UpToDate)
	} else {
		fmt.Fprintf(&b, "; sidecars: %d written, %d up to date, %d not worth keeping, %d stale removed",
			r.Written, r.UpToDate, r.NoGain, r.Removed)
	}
	if r.Outside > 0 {
		fmt.Fprintf(&b, "; %d links out of the tree skipped", r.Outside)
	}
	if r.BytesIn > 0 {
		fmt.Fprintf(&b, "; %s in, %s out (%.0f%%)", human(r.BytesIn), human(r.BytesOut), 100*float64(r.BytesOut)/float64(r.BytesIn))
	}
	fmt.Fprintf(&b, "; %v", r.Elapsed.Round(time.Millisecond))
	if len(r.Errors) > 0 {
		fmt.Fprintf(&b, "; %d errors", len(r.Errors))
	}
	if interrupted {
		b.WriteString("; interrupted")
	}
	return b.String()
}

func precompressCheck(dir string, cfg precompress.Config, asJSON bool, stdout, stderr io.Writer) int {
	rep, err := precompress.Check(dir, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "engine %v\n", err) // "precompress: ..."
		return 2
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		for _, p := range rep.Problems {
			switch p.Kind {
			case precompress.Older, precompress.Newer:
				fmt.Fprintf(stdout, "STALE %s: %s than %s (%s, file %s)\n", p.Sidecar, p.Kind, filepath.Base(p.File),
					p.SidecarMtime.UTC().Format(time.RFC3339Nano), p.FileMtime.UTC().Format(time.RFC3339Nano))
			case precompress.Orphaned:
				fmt.Fprintf(stdout, "ORPHANED %s: no file beside it\n", p.Sidecar)
			case precompress.Temporary:
				fmt.Fprintf(stdout, "TEMPORARY %s: left by an interrupted run\n", p.Sidecar)
			}
		}
		for _, e := range rep.Errors {
			fmt.Fprintf(stdout, "FAILED %v\n", e)
		}
		if rep.OK() {
			fmt.Fprintf(stdout, "all %d sidecars match their files\n", rep.Sidecars)
		} else {
			fmt.Fprintf(stdout, "%d problems, %d errors in %d sidecars\n", len(rep.Problems), len(rep.Errors), rep.Sidecars)
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}
