package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// TestStamp: what the build stamped names the build, in engine
// version's first line; Go's settings come with it.
func TestStamp(t *testing.T) {
	defer Stamp("", "", "")
	for _, tt := range []struct {
		version, commit, tree, want string
	}{
		{"1.2.3", "0123abcd", "clean", "engine 1.2.3 " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + " (commit 0123abcd, working tree clean)"},
		{"dev", "0123abcd", "modified-f00d", "(commit 0123abcd, working tree modified, fingerprint f00d)"},
		{"dev", "0123abcd", "modified", "(commit 0123abcd, working tree modified)"},
	} {
		Stamp(tt.version, tt.commit, tt.tree)
		if got := Get().String(); !strings.Contains(got, tt.want) {
			t.Errorf("Stamp(%q, %q, %q): %q, want it to contain %q", tt.version, tt.commit, tt.tree, got, tt.want)
		}
	}
	Stamp("", "", "")
	if i := Get(); i.Version == "" || i.GoVersion != runtime.Version() {
		t.Errorf("unstamped: %+v", i)
	}
}
