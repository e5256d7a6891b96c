package precompress

import (
	"os"
	"sort"
	"strings"
	"time"
)

// Kinds of Problem.
const (
	Older     = "older"     // the sidecar is older than its file: stale, and the server skips it
	Newer     = "newer"     // newer than its file: not made by precompress from this version (the server serves it)
	Orphaned  = "orphaned"  // its file is gone (or is not a regular file)
	Temporary = "temporary" // a temporary an interrupted run left behind
)

// Problem is one sidecar that does not match its file.
type Problem struct {
	Kind         string    `json:"problem"`
	Sidecar      string    `json:"sidecar"`
	File         string    `json:"file,omitempty"`
	FileMtime    time.Time `json:"file_mtime,omitzero"`
	SidecarMtime time.Time `json:"sidecar_mtime,omitzero"`
}

// CheckReport is what Check found.
type CheckReport struct {
	Sidecars int         `json:"sidecars"` // sidecars looked at
	Problems []Problem   `json:"problems"`
	Errors   []FileError `json:"errors,omitempty"`
}

// OK reports whether the tree is clean: no problem and no error.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 && len(r.Errors) == 0 }

// Check finds the sidecars below root (of cfg.Codings) whose
// modification time differs from their file's, those whose file is gone,
// and leftover temporaries. A sidecar is a file named like one of a
// compressible name ("app.js.br"); "release.tar.gz" is not (a tar gets no
// sidecar), so an archive never counts as an orphan. Nothing is
// compressed, written or removed.
func Check(root string, cfg Config) (*CheckReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t, err := scan(root)
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Problems: []Problem{}, Errors: t.errs}
	for _, tmp := range t.temps {
		rep.Problems = append(rep.Problems, Problem{Kind: Temporary, Sidecar: tmp})
	}
	for _, s := range t.sidecars {
		var base string
		for _, c := range cfg.Codings {
			if b, ok := strings.CutSuffix(s.path, c.Suffix); ok {
				base = b
			}
		}
		if base == "" {
			continue // a coding not asked about
		}
		rep.Sidecars++
		st, err := os.Stat(base)
		switch {
		case notFound(err), err == nil && !st.Mode().IsRegular():
			rep.Problems = append(rep.Problems, Problem{Kind: Orphaned, Sidecar: s.path, SidecarMtime: s.mtime})
		case err != nil:
			rep.Errors = append(rep.Errors, FileError{Path: base, Err: err})
		case !st.ModTime().Equal(s.mtime):
			kind := Older
			if s.mtime.After(st.ModTime()) {
				kind = Newer
			}
			rep.Problems = append(rep.Problems, Problem{Kind: kind, Sidecar: s.path, File: base,
				FileMtime: st.ModTime(), SidecarMtime: s.mtime})
		}
	}
	sort.Slice(rep.Problems, func(i, j int) bool { return rep.Problems[i].Sidecar < rep.Problems[j].Sidecar })
	return rep, nil
}
