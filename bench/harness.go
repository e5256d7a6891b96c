package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Harness is what the repository's benchmark tools (bench/obs, bench/acme,
// bench/wtcap) set up first: a work directory, the engine built from the
// tree they run in, and the revision it was built from, for their pages.
type Harness struct {
	Work     string // a temporary directory, removed by Close
	Engine   string // the engine binary, built from ./cmd/engine
	Revision string // "abc1234", with " (with uncommitted changes)" when the tree differs
}

// NewHarness makes the work directory (its name starts with prefix) and
// builds the engine into it; run it from the repository's root.
func NewHarness(prefix string) (*Harness, error) {
	work, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	h := &Harness{Work: work, Engine: filepath.Join(work, "engine")}
	if b, err := exec.Command("go", "build", "-o", h.Engine, "./cmd/engine").CombinedOutput(); err != nil {
		os.RemoveAll(work)
		return nil, fmt.Errorf("build engine: %v\n%s", err, b)
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	dirty, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	h.Revision = strings.TrimSpace(string(commit))
	if len(dirty) > 0 {
		h.Revision += " (with uncommitted changes)"
	}
	return h, nil
}

// Close removes the work directory.
func (h *Harness) Close() { os.RemoveAll(h.Work) }

// KernelRelease is the running kernel's release, for benchmark pages.
func KernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
