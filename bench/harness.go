package bench

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Harness is what the repository's benchmark tools (bench/obs, bench/acme,
// bench/wtcap) set up first: a work directory and the engine built from
// the tree they run in, stamped with the commit and the state of the
// working tree at the moment of the build.
type Harness struct {
	Work   string // a temporary directory, removed by Close
	Engine string // the engine binary, built from ./cmd/engine
	Build  *Build // what it was built from
}

// NewHarness makes the work directory (its name starts with prefix) and
// builds the engine into it; run it from the repository's root.
func NewHarness(prefix string) (*Harness, error) {
	work, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	h := &Harness{Work: work, Engine: filepath.Join(work, "engine")}
	if h.Build, err = BuildEngine(".", h.Engine); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	return h, nil
}

// Close removes the work directory.
func (h *Harness) Close() { os.RemoveAll(h.Work) }

// Preamble is what a page of a tool built on a Harness says first: the
// engine measured (the commit and working tree it was built from, at the
// build, and what its `engine version` says) and the machine.
func (h *Harness) Preamble() string {
	return fmt.Sprintf("Engine: built by this run at %s from commit %s (untracked files count as changes, files git ignores are not looked at); `engine version`: `%s`.\n\nMachine: %s.",
		h.Build.At.UTC().Format("15:04 MST"), h.Build.Tree, h.Build.Version, Machine())
}

// TreeNote is what a page says when the tree the engine was built from
// changed before the run ended, "" when it did not; read it before
// writing a page into that tree.
func (h *Harness) TreeNote() string {
	d := h.Build.Changed()
	if d == "" {
		return ""
	}
	return "**The working tree changed during the run** (" + d + "): the figures are those of the binary built at the start, from the tree named above, not of the tree as it is now."
}

// WriteHead writes what a page of a tool built on a Harness opens with:
// its title, the command and when it ran, the Preamble, and the TreeNote
// when there is one.
func WriteHead(b *strings.Builder, title, command string, when time.Time, preamble, treeNote string) {
	fmt.Fprintf(b, "# %s\n\n`%s`, %s.\n\n%s\n\n", title, command, when.Format("2006-01-02 15:04 UTC"), preamble)
	if treeNote != "" {
		fmt.Fprintf(b, "%s\n\n", treeNote)
	}
}

// FirstLine is the first line of a program's output for its version
// ("nginx -v", "wrk -v"), whether it exits 0 or not; "" when it prints
// nothing.
func FirstLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// Tree is a git working tree at one moment: its HEAD and its uncommitted
// changes. Untracked files count as changes (go build compiles an
// untracked file of a package); files git ignores do not.
type Tree struct {
	Head string // the full commit hash, "" when git could not tell (Err says why)
	// Changed is every changed path as git status --porcelain gives it
	// ("M bench/harness.go", "?? notes.txt"), sorted.
	Changed []string
	// Fingerprint is a hash of HEAD and of the name, status and content
	// of every changed path: two readings with the same fingerprint saw
	// the same tree (as far as git does not ignore it).
	Fingerprint string
	// contents is each changed path's content hash, to name the paths
	// that changed between two readings.
	contents map[string]string
	Err      error
}

// ReadTree reads the working tree of the git repository at dir, without
// writing to it (git --no-optional-locks: not even the index).
func ReadTree(dir string) Tree {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", append([]string{"--no-optional-locks"}, args...)...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	var t Tree
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		t.Err = err
		return t
	}
	t.Head = strings.TrimSpace(string(head))
	status, err := git("status", "--porcelain", "-z", "--untracked-files=all")
	if err != nil {
		t.Err = err
		return t
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		t.Err = err
		return t
	}
	root := strings.TrimSpace(string(top))
	t.contents = map[string]string{}
	fp := sha256.New()
	fmt.Fprintf(fp, "HEAD %s\n", t.Head)
	fields := strings.Split(string(status), "\x00")
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		xy, path := f[:2], f[3:]
		if xy[0] == 'R' || xy[0] == 'C' {
			i++ // the source of a rename or copy follows
		}
		line := strings.TrimSpace(xy) + " " + path
		t.Changed = append(t.Changed, line)
		t.contents[path] = fileHash(filepath.Join(root, path))
	}
	slices.Sort(t.Changed)
	for _, line := range t.Changed {
		path := line[strings.IndexByte(line, ' ')+1:]
		fmt.Fprintf(fp, "%s %s\n", line, t.contents[path])
	}
	t.Fingerprint = hex.EncodeToString(fp.Sum(nil))[:12]
	return t
}

// fileHash is a file's SHA-256, "absent" for a deleted one.
func fileHash(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "absent"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable"
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Clean reports whether the tree had no uncommitted change.
func (t Tree) Clean() bool { return t.Err == nil && len(t.Changed) == 0 }

// Stamp is the engine's tree stamp: "clean", or "modified-" and the
// fingerprint.
func (t Tree) Stamp() string {
	if t.Clean() {
		return "clean"
	}
	return "modified-" + t.Fingerprint
}

// String says what the tree was, for a page: "0123...cdef, clean", or
// "0123...cdef with uncommitted changes (2 paths: M bench/harness.go,
// ?? x.go; fingerprint 4f1c2a9b0d3e)".
func (t Tree) String() string {
	if t.Err != nil {
		return "unknown (" + t.Err.Error() + ")"
	}
	if t.Clean() {
		return t.Head + ", clean"
	}
	paths := t.Changed
	more := ""
	if len(paths) > 8 {
		paths, more = paths[:8], fmt.Sprintf(" and %d more", len(t.Changed)-8)
	}
	n := fmt.Sprintf("%d paths", len(t.Changed))
	if len(t.Changed) == 1 {
		n = "1 path"
	}
	return fmt.Sprintf("%s with uncommitted changes (%s: %s%s; fingerprint %s)", t.Head, n, strings.Join(paths, ", "), more, t.Fingerprint)
}

// Since names what differs between an earlier reading of the tree and
// this one: another HEAD, paths changed, or "" when nothing does.
func (t Tree) Since(before Tree) string {
	switch {
	case t.Err != nil || before.Err != nil:
		return "could not tell (" + fmt.Sprint(cmpErr(t.Err, before.Err)) + ")"
	case t.Fingerprint == before.Fingerprint:
		return ""
	case t.Head != before.Head:
		return fmt.Sprintf("HEAD moved from %s to %s", before.Head, t.Head)
	}
	var paths []string
	for p, h := range t.contents {
		if before.contents[p] != h {
			paths = append(paths, p)
		}
	}
	for p := range before.contents {
		if _, ok := t.contents[p]; !ok {
			paths = append(paths, p+" (reverted)")
		}
	}
	slices.Sort(paths)
	return "changed: " + strings.Join(paths, ", ")
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Build is an engine binary built from a working tree, and what that
// tree was at the moment of the build.
type Build struct {
	Path    string
	Dir     string    // the tree built from
	Tree    Tree      // read just before the build, and found the same just after
	At      time.Time // when the build ended
	Version string    // what the binary's `engine version` prints
}

// BuildEngine builds ./cmd/engine of the repository at dir into out,
// stamped (-ldflags -X) with the commit and the state of the working tree
// it was built from (engine version prints them). The tree is read before
// and after the build; a tree that changed meanwhile is built again, up to
// three times, and then is an error.
func BuildEngine(dir, out string) (*Build, error) {
	for try := 1; ; try++ {
		before := ReadTree(dir)
		if before.Err != nil {
			return nil, fmt.Errorf("build engine: read the working tree: %w", before.Err)
		}
		ldflags := fmt.Sprintf("-X main.commit=%s -X main.tree=%s", before.Head, before.Stamp())
		cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, "./cmd/engine")
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build engine: %v\n%s", err, b)
		}
		after := ReadTree(dir)
		if d := after.Since(before); d != "" {
			if try < 3 {
				continue
			}
			return nil, fmt.Errorf("build engine: the working tree kept changing during the build (%s)", d)
		}
		v, err := exec.Command(out, "version").Output()
		if err != nil {
			return nil, fmt.Errorf("build engine: %s version: %w", out, err)
		}
		return &Build{Path: out, Dir: dir, Tree: before, At: time.Now(), Version: VersionLine(v)}, nil
	}
}

// Changed is how the tree the binary was built from differs now, "" when
// it does not: read before a page is written, so that a page whose tree
// moved during the run says so.
func (b *Build) Changed() string {
	return ReadTree(b.Dir).Since(b.Tree)
}

// Describe is the page's sentence on what was measured: the commit and
// tree, when, and what the binary says it is.
func (b *Build) Describe() string {
	return fmt.Sprintf("built by this run at %s from commit %s (untracked files count as changes, files git ignores are not looked at); `engine version`: `%s`",
		b.At.UTC().Format("15:04 MST"), b.Tree, b.Version)
}

var stampedCommit = regexp.MustCompile(`\(commit ([0-9a-f]{7,40})(?:, working tree ([a-z, 0-9]+))?\)`)

// VersionCommit reads what an engine binary's `engine version` output
// names: its commit and the working tree's state then ("clean",
// "modified, fingerprint 4f1c2a9b0d3e"); "" and "" when it names no
// commit (a binary built without the stamp).
func VersionCommit(version string) (commit, tree string) {
	m := stampedCommit.FindStringSubmatch(version)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

// KernelRelease is the running kernel's release, for benchmark pages.
func KernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// CPUModel is the processor's model name ("Intel(R) Xeon(R) Processor"),
// from /proc/cpuinfo; with several models, each with its count. "unknown"
// where it cannot be read.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown (" + runtime.GOOS + ": no /proc/cpuinfo)"
	}
	return cpuModel(string(b))
}

// cpuModel reads /proc/cpuinfo's text: x86's "model name", or another
// architecture's "Model" or "cpu model" lines.
func cpuModel(cpuinfo string) string {
	count := map[string]int{}
	var order []string
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name", "Model", "cpu model":
			v = strings.Join(strings.Fields(v), " ")
			if count[v] == 0 {
				order = append(order, v)
			}
			count[v]++
		}
	}
	switch len(order) {
	case 0:
		return "unknown (no model name in /proc/cpuinfo)"
	case 1:
		return order[0]
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%d × %s", count[m], m)
	}
	return strings.Join(parts, ", ")
}

// Machine is the line every benchmark page opens with: the CPU model and
// count, the kernel and the Go toolchain.
func Machine() string {
	return fmt.Sprintf("%s, %d CPUs; kernel %s; %s", CPUModel(), runtime.NumCPU(), KernelRelease(), runtime.Version())
}

// VersionLine is engine version's first line, the one that names the
// build (build settings follow it).
func VersionLine(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
