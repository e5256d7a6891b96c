package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrecompressCommand runs engine precompress as a user would: a run,
// a second run that writes nothing, --check clean and then not, --json,
// and the exit statuses.
func TestPrecompressCommand(t *testing.T) {
	dir := t.TempDir()
	page := strings.Repeat("<p>engine precompress</p>\n", 200)
	os.WriteFile(filepath.Join(dir, "index.html"), []byte(page), 0o644)
	os.WriteFile(filepath.Join(dir, "tiny.css"), []byte("a{}"), 0o644)

	code, out, errs := run2("precompress", dir, "--codings", "gzip,zstd")
	if code != 0 || out != "" || !strings.Contains(errs, "sidecars: 2 written, 0 up to date") {
		t.Fatalf("precompress: %d\nstdout %q\nstderr %s", code, out, errs)
	}
	st, _ := os.Stat(filepath.Join(dir, "index.html"))
	for _, s := range []string{".gz", ".zst"} {
		side, err := os.Stat(filepath.Join(dir, "index.html"+s))
		if err != nil || !side.ModTime().Equal(st.ModTime()) || side.Size() >= st.Size() {
			t.Errorf("index.html%s: %v %v", s, side, err)
		}
	}
	for _, p := range []string{"index.html.br", "tiny.css.gz"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s written", p)
		}
	}
	if code, _, errs := run2("precompress", "-j", "1", "--codings", "gzip,zstd", dir); code != 0 || !strings.Contains(errs, "0 written, 2 up to date") {
		t.Errorf("second run: %d %s", code, errs)
	}
	if code, out, _ := run2("precompress", dir, "--check"); code != 0 || !strings.Contains(out, "all 2 sidecars match") {
		t.Errorf("--check of a clean tree: %d %s", code, out)
	}

	later := st.ModTime().Add(time.Minute)
	os.Chtimes(filepath.Join(dir, "index.html"), time.Time{}, later)
	code, out, _ = run2("precompress", dir, "--check")
	if code != 1 || !strings.Contains(out, "STALE "+filepath.Join(dir, "index.html.gz")+": older than index.html") {
		t.Errorf("--check of a stale sidecar: %d %s", code, out)
	}
	code, out, _ = run2("precompress", dir, "--check", "--json")
	var rep struct {
		Sidecars int
		Problems []struct{ Problem, Sidecar string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Sidecars != 2 || len(rep.Problems) != 2 ||
		rep.Problems[0].Problem != "older" {
		t.Errorf("--check --json: %d %v\n%s", code, err, out)
	}
	code, out, _ = run2("precompress", dir, "--dry-run")
	if code != 0 || !strings.Contains(out, "compress "+filepath.Join(dir, "index.html.br")+"\n") {
		t.Errorf("--dry-run: %d %s", code, out)
	}

	for _, args := range [][]string{
		{"precompress"},
		{"precompress", filepath.Join(dir, "missing")},
		{"precompress", filepath.Join(dir, "index.html")},
		{"precompress", dir, "--codings", "lz4"},
		{"precompress", dir, "--min-saving", "100"},
		{"precompress", dir, "--min-size", "lots"},
		{"precompress", dir, "--check", filepath.Join(dir, "missing")},
	} {
		if code, _, errs := run2(args...); code != 2 || errs == "" {
			t.Errorf("%q: exit %d, want 2 and a reason (%q)", args, code, errs)
		}
	}
}
