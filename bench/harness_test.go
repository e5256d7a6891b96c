package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitRepo makes a repository in a new directory with files committed,
// and returns the directory and a function that runs git in it.
func gitRepo(t *testing.T, files map[string]string) (string, func(args ...string) string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	for name, content := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(files) > 0 {
		git("add", "-A")
		git("commit", "-q", "-m", "fixture")
	}
	return dir, git
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadTree: a clean tree, a modified file, an untracked one and an
// ignored one; a change to a file already modified is seen, and so is
// a new commit.
func TestReadTree(t *testing.T) {
	dir, git := gitRepo(t, map[string]string{"a.txt": "a\n", ".gitignore": "*.log\n"})
	clean := ReadTree(dir)
	if clean.Err != nil || !clean.Clean() || clean.Head != git("rev-parse", "HEAD") || clean.Stamp() != "clean" || !strings.HasSuffix(clean.String(), ", clean") {
		t.Fatalf("clean tree: %+v (%s)", clean, clean)
	}
	write(t, filepath.Join(dir, "a.txt"), "b\n")
	write(t, filepath.Join(dir, "new.txt"), "new\n")
	write(t, filepath.Join(dir, "x.log"), "ignored\n")
	dirty := ReadTree(dir)
	if want := []string{"?? new.txt", "M a.txt"}; !slices.Equal(dirty.Changed, want) {
		t.Errorf("changed %q, want %q (ignored files left out)", dirty.Changed, want)
	}
	if dirty.Clean() || dirty.Fingerprint == clean.Fingerprint || dirty.Stamp() != "modified-"+dirty.Fingerprint {
		t.Errorf("modified tree: clean %v, fingerprint %s (clean %s), stamp %s", dirty.Clean(), dirty.Fingerprint, clean.Fingerprint, dirty.Stamp())
	}
	if s := dirty.String(); !strings.Contains(s, "with uncommitted changes (2 paths: ?? new.txt, M a.txt; fingerprint "+dirty.Fingerprint+")") {
		t.Errorf("String() = %q", s)
	}
	if d := ReadTree(dir).Since(dirty); d != "" {
		t.Errorf("the same tree read again: Since = %q, want \"\"", d)
	}
	write(t, filepath.Join(dir, "x.log"), "ignored, changed\n")
	if d := ReadTree(dir).Since(dirty); d != "" {
		t.Errorf("an ignored file changed: Since = %q, want \"\"", d)
	}
	write(t, filepath.Join(dir, "a.txt"), "c\n") // modified again: the status line is the same
	if d := ReadTree(dir).Since(dirty); d != "changed: a.txt" {
		t.Errorf("a modified file modified again: Since = %q, want \"changed: a.txt\"", d)
	}
	git("add", "-A")
	git("commit", "-q", "-m", "second")
	if d := ReadTree(dir).Since(dirty); !strings.HasPrefix(d, "HEAD moved from "+clean.Head) {
		t.Errorf("after a commit: Since = %q", d)
	}
	if bad := ReadTree(t.TempDir()); bad.Err == nil || !strings.HasPrefix(bad.String(), "unknown (") {
		t.Errorf("not a repository: %+v", bad)
	}
}

// TestBuildEngineStamp builds the engine from a copy of this commit's
// tree, clean and then with a change, and checks that `engine version`
// names the commit and the tree's state each time, as VersionCommit
// reads it back.
func TestBuildEngineStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the engine twice")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	// A repository of its own, so this test never touches the tree it
	// runs in: a copy of that tree's files (tracked and untracked, as
	// they are now), committed.
	list, err := exec.Command("git", "-C", "..", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout?)", err)
	}
	dir, git := gitRepo(t, nil)
	for _, name := range strings.Split(string(list), "\x00") {
		b, err := os.ReadFile(filepath.Join("..", name))
		if name == "" || err != nil {
			continue // deleted in the tree
		}
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		write(t, filepath.Join(dir, name), string(b))
	}
	git("add", "-A")
	git("commit", "-q", "-m", "copy")
	head := git("rev-parse", "HEAD")

	bin := filepath.Join(t.TempDir(), "engine")
	b, err := BuildEngine(dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	if want := "(commit " + head + ", working tree clean)"; !strings.Contains(b.Version, want) || !b.Tree.Clean() {
		t.Errorf("clean tree: engine version = %q, want it to contain %q", b.Version, want)
	}
	if c, tree := VersionCommit(b.Version); c != head || tree != "clean" {
		t.Errorf("VersionCommit(%q) = %q, %q", b.Version, c, tree)
	}
	if d := b.Changed(); d != "" {
		t.Errorf("nothing changed since the build, Changed() = %q", d)
	}

	write(t, filepath.Join(dir, "cmd", "engine", "stamp_test_extra.go"), "package main\n\n// Added by TestBuildEngineStamp.\nconst stampTest = 1\n")
	if d := b.Changed(); d != "changed: cmd/engine/stamp_test_extra.go" {
		t.Errorf("after a file was added, Changed() = %q", d)
	}
	b, err = BuildEngine(dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	fp := b.Tree.Fingerprint
	if want := "(commit " + head + ", working tree modified, fingerprint " + fp + ")"; !strings.Contains(b.Version, want) || b.Tree.Clean() {
		t.Errorf("modified tree: engine version = %q, want it to contain %q", b.Version, want)
	}
	if c, tree := VersionCommit(b.Version); c != head || tree != "modified, fingerprint "+fp {
		t.Errorf("VersionCommit(%q) = %q, %q", b.Version, c, tree)
	}
	if out, _ := exec.Command(bin, "version").Output(); VersionLine(out) != b.Version {
		t.Errorf("Build.Version %q, the binary says %q", b.Version, out)
	}
	if c, tree := VersionCommit("engine dev go1.26.8 linux/amd64"); c != "" || tree != "" {
		t.Errorf("an unstamped version: VersionCommit = %q, %q, want nothing", c, tree)
	}
}

func TestCPUModel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n", "Intel(R) Xeon(R) Processor"},
		{"model name : AMD EPYC  7B13\nmodel name : AMD EPYC  7B13\nmodel name : Other\n", "2 × AMD EPYC 7B13, 1 × Other"},
		{"processor : 0\nBogoMIPS : 50.00\nModel : Raspberry Pi 4 Model B\n", "Raspberry Pi 4 Model B"},
		{"processor : 0\n", "unknown (no model name in /proc/cpuinfo)"},
	} {
		if got := cpuModel(tc.in); got != tc.want {
			t.Errorf("cpuModel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
