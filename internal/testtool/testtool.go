// Package testtool finds the command-line programs tests run as real
// peers and references (curl, openssl, b3sum, nginx, h2spec, pebble...),
// and holds the one rule for a test that needs one the machine lacks: it
// skips, naming the program and how to install it, except where
// ENGINE_REQUIRE_TOOLS is set (.ci/run, which installs them all), where it
// fails instead.
//
// It only looks programs up; it never installs or runs them.
// Invariant: a test never returns early, or leaves a check out, because a
// program is missing without going through Missing: the skip is then
// recorded and judged by scripts/test.sh (ENGINE_REQUIRE_NO_SKIP).
package testtool

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireEnv names the variable that turns a missing tool into a failure.
const RequireEnv = "ENGINE_REQUIRE_TOOLS"

// Require returns the path of the program name, or ends the test (Missing)
// when it is not installed.
func Require(t testing.TB, name string) string {
	t.Helper()
	p, ok := Find(name)
	if !ok {
		Missing(t, name)
	}
	return p
}

// RequireFile ends the test (Missing) unless path exists: a file a
// program needs, such as a module nginx loads. what names it in the
// message and install says how to get it.
func RequireFile(t testing.TB, path, what, install string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Lacking(t, what+" ("+path+")", install)
	}
}

// Find looks name up in PATH, then in the bin directory of GOPATH, where
// go install puts the tools .ci/run builds (h2spec, pebble). It reports
// false when neither has it.
func Find(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	if gp, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(gp))) {
			p := filepath.Join(dir, "bin", name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, true
			}
		}
	}
	return "", false
}

// Missing ends the test for the program name it needs and did not find: a
// failure when ENGINE_REQUIRE_TOOLS is set, otherwise a skip whose message
// names the program and how to install it.
func Missing(t testing.TB, name string) {
	t.Helper()
	Lacking(t, name, Install(name))
}

// Lacking is Missing for what is not one program found by Find: a
// package, a module, a program at a pinned version. what names it, and
// install says how to get it.
func Lacking(t testing.TB, what, install string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s is required (%s is set) but not installed: %s", what, RequireEnv, install)
	}
	t.Skipf("%s not installed; install it (%s) to run this test", what, install)
}

// Versions of the tools built with go install, as .ci/run pins them.
const (
	H2specVersion = "v2.2.1+incompatible"
	PebbleVersion = "v2.10.3"
)

// Install says how to get the program name, the way .ci/run does.
func Install(name string) string {
	switch name {
	case "h2load":
		return "apt-get install nghttp2-client"
	case "qemu-system-x86_64":
		return "apt-get install qemu-system-x86"
	case "systemd-analyze":
		return "apt-get install systemd"
	case "certutil":
		return "apt-get install libnss3-tools"
	case "h2spec":
		return "go install github.com/summerwind/h2spec/cmd/h2spec@" + H2specVersion
	case "pebble", "pebble-challtestsrv":
		return "go install github.com/letsencrypt/pebble/v2/cmd/" + name + "@" + PebbleVersion
	}
	return "apt-get install " + name
}
