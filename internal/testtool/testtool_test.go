package testtool

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for a test: it records how Missing ended it, and
// ends its goroutine as testing.T does.
type recorder struct {
	testing.TB
	skip, fatal string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Skipf(f string, a ...any)  { r.skip = fmt.Sprintf(f, a...); runtime.Goexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...); runtime.Goexit() }

// end runs f as a test body runs: on a goroutine of its own.
func (r *recorder) end(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		require            string
		wantSkip, wantFail string
	}{
		{"", "h2load not installed; install it (apt-get install nghttp2-client) to run this test", ""},
		{"1", "", "h2load is required (ENGINE_REQUIRE_TOOLS is set) but not installed: apt-get install nghttp2-client"},
	} {
		t.Setenv(RequireEnv, tc.require)
		r := &recorder{TB: t}
		r.end(func() { Missing(r, "h2load") })
		if r.skip != tc.wantSkip || r.fatal != tc.wantFail {
			t.Errorf("%s=%q: Missing skipped %q and failed %q; want %q and %q", RequireEnv, tc.require, r.skip, r.fatal, tc.wantSkip, tc.wantFail)
		}
	}
	t.Setenv(RequireEnv, "")
	r := &recorder{TB: t}
	r.end(func() {
		RequireFile(r, "/nonexistent/ngx_stream_module.so", "nginx's stream module", "apt-get install libnginx-mod-stream")
	})
	if !strings.HasPrefix(r.skip, "nginx's stream module (/nonexistent/ngx_stream_module.so) not installed; install it (apt-get install libnginx-mod-stream)") {
		t.Errorf("RequireFile of a missing file skipped with %q", r.skip)
	}
}

func TestFind(t *testing.T) {
	if p, ok := Find("go"); !ok || p == "" {
		t.Errorf(`Find("go") = %q, %v; the go command runs these tests`, p, ok)
	}
	if p, ok := Find("engine-no-such-tool"); ok {
		t.Errorf(`Find("engine-no-such-tool") = %q, true`, p)
	}
}

func TestInstall(t *testing.T) {
	for name, want := range map[string]string{
		"curl":                "apt-get install curl",
		"h2load":              "apt-get install nghttp2-client",
		"h2spec":              "go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible",
		"pebble-challtestsrv": "go install github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@v2.10.3",
	} {
		if got := Install(name); got != want {
			t.Errorf("Install(%q) = %q, want %q", name, got, want)
		}
	}
}
