package engine_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/preflight"
)

// freePort returns a loopback address nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// refuses checks that a config is refused by preflight before anything
// binds: the port is still free afterwards.
func refuses(t *testing.T, text string, wantCheck string) {
	t.Helper()
	root := t.TempDir()
	addr := freePort(t)
	cfg, err := config.Parse("engine.toml", root, []byte(fmt.Sprintf("root = %q\nlisten = %q\n%s", root, addr, text)))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := engine.New(cfg, nil)
	if err == nil {
		srv.Run(canceledContext())
		t.Fatalf("started although %s is required and missing", wantCheck)
	}
	var pe *engine.PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("error %T %v, want a PreflightError", err, err)
	}
	found := false
	for _, c := range pe.Report.Failed() {
		found = found || c.ID == wantCheck
	}
	if !found {
		t.Errorf("failed checks %+v do not include %s", pe.Report.Failed(), wantCheck)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %s not free after the refusal: %v", addr, err)
	}
	l.Close()
}

func TestServeRefusesMissingCongestion(t *testing.T) {
	// A congestion control no kernel has: refused on every machine.
	refuses(t, "[kernel]\nbulk_congestion = \"nosuch_cc\"\nbbr = \"require\"\n", "tcp.congestion")
}

func TestServeRefusesMissingKTLS(t *testing.T) {
	if err := new(preflight.Prober).TLSULP(); !errors.Is(err, preflight.ErrNotSupported) {
		t.Skipf("this kernel has kernel TLS (%v); the refusal needs one without", err)
	}
	refuses(t, "[kernel]\nktls = \"require\"\n", "ktls.ulp")
}

// TestServeDegradesOnAuto: with "auto" a missing feature is a warning in
// the log and the server runs.
func TestServeDegradesOnAuto(t *testing.T) {
	root := siteRoot(t)
	var logs syncBuffer
	ts := startLog(t, fmt.Sprintf("root = %q\n[kernel]\nbulk_congestion = \"nosuch_cc\"\nbbr = \"auto\"\n", root), &logs)
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), "running degraded") || !strings.Contains(logs.String(), "check=tcp.congestion") {
		t.Errorf("no warning for the missing congestion control:\n%s", logs.String())
	}
	// "off" does not probe at all.
	var quiet syncBuffer
	startLog(t, fmt.Sprintf("root = %q\n[kernel]\nbulk_congestion = \"nosuch_cc\"\nbbr = \"off\"\n", root), &quiet)
	if strings.Contains(quiet.String(), "tcp.congestion") {
		t.Errorf("bbr = \"off\" still probed:\n%s", quiet.String())
	}
}
