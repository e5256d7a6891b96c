package precompress

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/files"
)

// Report is what a run did. Counts of sidecars are per file and coding.
type Report struct {
	Files        int `json:"files"`        // regular files seen, below dot paths excluded
	Compressible int `json:"compressible"` // of a compressible type (Compressible)
	TooSmall     int `json:"too_small"`    // of those, under MinSize: no sidecars
	Outside      int `json:"outside"`      // symbolic links out of the tree or to dot paths: skipped

	Written  int `json:"written"`    // sidecars written
	UpToDate int `json:"up_to_date"` // sidecars already there with the file's mtime
	NoGain   int `json:"no_gain"`    // not written: they would not save MinSaving
	Removed  int `json:"removed"`    // stale sidecars removed (the file changed and no longer gets one)
	// TempsRemoved counts temporaries an interrupted run left behind.
	TempsRemoved int `json:"temps_removed"`

	BytesIn  int64         `json:"bytes_in"`  // of the files compressed into sidecars written
	BytesOut int64         `json:"bytes_out"` // of those sidecars
	Elapsed  time.Duration `json:"elapsed_ns"`

	// Planned lists, for a dry run, the sidecars that would be
	// compressed (and kept if they save enough) and, prefixed "remove ",
	// the stale ones that would be removed.
	Planned []string    `json:"planned,omitempty"`
	Errors  []FileError `json:"errors,omitempty"`
}

// MarshalJSON writes the error as text.
func (e FileError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Path  string `json:"path"`
		Error string `json:"error"`
	}{e.Path, e.Error()})
}

// job is one sidecar to bring up to date.
type job struct {
	f   *file
	c   files.Coding
	idx int // of f in the run's sources, for progress
}

// Run brings the sidecars of every compressible file below root up to
// date, cfg.Workers at a time:
//
//   - a sidecar with the file's mtime is up to date and left alone;
//   - otherwise the file is compressed and the sidecar kept only when it
//     saves cfg.MinSaving percent; a file under cfg.MinSize gets none;
//   - a sidecar that is not up to date and is not rewritten (too small,
//     too little saving) is removed: it was made from other content.
//
// A coding that saved too little is tried again on the next run (only
// a kept sidecar records anything). Per-file failures are in the
// report's Errors and the run goes on; the error returned is for a root
// that cannot be walked, or ctx's when it was cancelled (the report then
// counts what was done; no temporary is left).
func Run(ctx context.Context, root string, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	t, err := scan(root)
	if err != nil {
		return nil, err
	}
	rep := &Report{Files: t.files, Compressible: len(t.sources), Outside: t.outside, Errors: t.errs}
	for _, tmp := range t.temps {
		if cfg.DryRun {
			rep.Planned = append(rep.Planned, "remove "+tmp)
			continue
		}
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			rep.Errors = append(rep.Errors, FileError{Path: tmp, Err: err})
		} else {
			rep.TempsRemoved++
		}
	}

	r := &runner{cfg: cfg, rep: rep, left: make([]atomic.Int32, len(t.sources))}
	var jobs []job
	for i := range t.sources {
		f := &t.sources[i]
		if f.size < cfg.MinSize {
			rep.TooSmall++
		}
		r.left[i].Store(int32(len(cfg.Codings)))
		r.prog.TotalFiles++
		for _, c := range cfg.Codings {
			jobs = append(jobs, job{f: f, c: c, idx: i})
			r.prog.TotalBytes += f.size
		}
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				r.do(ctx, j)
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	sort.Slice(rep.Errors, func(i, j int) bool { return rep.Errors[i].Path < rep.Errors[j].Path })
	sort.Strings(rep.Planned)
	rep.Elapsed = time.Since(start)
	return rep, ctx.Err()
}

// runner is one run's shared state.
type runner struct {
	// Immutable after construction.
	cfg Config

	mu   sync.Mutex // guards rep and prog: workers record results
	rep  *Report
	prog Progress
	left []atomic.Int32 // per source file: codings not yet done; any worker
}

func (r *runner) do(ctx context.Context, j job) {
	side := j.f.path + j.c.Suffix
	var n int64
	out, err := r.sidecar(ctx, j, side, &n)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return // the run reports ctx's error
	case err != nil:
		r.rep.Errors = append(r.rep.Errors, FileError{Path: side, Err: err})
	}
	switch out &^ removedStale {
	case written:
		r.rep.Written++
		r.rep.BytesIn += j.f.size
		r.rep.BytesOut += n
	case upToDate:
		r.rep.UpToDate++
	case noGain:
		r.rep.NoGain++
	case planned:
		r.rep.Planned = append(r.rep.Planned, side)
	}
	if removed := out&removedStale != 0; removed && r.cfg.DryRun {
		r.rep.Planned = append(r.rep.Planned, "remove "+side)
	} else if removed {
		r.rep.Removed++
	}
	r.prog.Bytes += j.f.size
	if r.left[j.idx].Add(-1) == 0 {
		r.prog.Files++
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(r.prog)
	}
}

type outcome uint8

const (
	nothing  outcome = iota
	written          // a new sidecar
	upToDate         // the sidecar has the file's mtime
	noGain           // not worth keeping
	planned          // dry run: would be compressed
	tooSmall         // the file is under MinSize

	removedStale outcome = 1 << 7 // or'ed: a stale sidecar was (or would be) removed
)

// sidecar brings one sidecar up to date.
func (r *runner) sidecar(ctx context.Context, j job, side string, n *int64) (outcome, error) {
	st, err := os.Lstat(side)
	exists := err == nil
	if err != nil && !notFound(err) {
		return nothing, err
	}
	if exists && st.Mode().IsRegular() && st.ModTime().Equal(j.f.mtime) {
		return upToDate, nil
	}
	// What exists now is stale (made from other content, or not a file
	// of ours: a link, a directory): replaced or removed below.
	var out outcome
	switch {
	case j.f.size < r.cfg.MinSize:
		out = tooSmall
	case r.cfg.DryRun:
		return planned, nil
	default:
		*n, err = compress(ctx, j.f.path, side, j.c, r.cfg.MinSaving, r.cfg.midway)
		switch {
		case err == nil:
			return written, nil
		case errors.Is(err, errNoGain):
			out = noGain
		default:
			return nothing, err
		}
	}
	if !exists {
		return out, nil
	}
	if r.cfg.DryRun {
		return out | removedStale, nil
	}
	if err := os.Remove(side); err != nil && !notFound(err) {
		return out, err
	}
	return out | removedStale, nil
}
