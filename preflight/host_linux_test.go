package preflight

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/mediaship/engine/internal/vmtest"
)

// TestHostProbes runs the real probes on this machine's kernel and checks
// each answer against independent evidence (what /proc lists, which
// modules exist), so the test holds on any kernel: the development and CI
// machines, built without CONFIG_TLS, must report kTLS missing with the
// remedy; a kernel with kTLS must report it present.
func TestHostProbes(t *testing.T) {
	if vmtest.InVM() {
		t.Skip("the VM runs TestKernelTLS* instead")
	}
	p := &Prober{}
	ulp := p.TLSULP()
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_ulp")
	mod := p.tlsModule()
	root := os.Geteuid() == 0
	switch {
	case bytes.Contains(avail, []byte("tls")):
		if ulp != nil {
			t.Errorf("tcp_available_ulp lists tls but the probe says %v", ulp)
		}
	case mod == "":
		notSupported(t, "kernel without a tls module", ulp, "CONFIG_TLS", "ENOENT")
	case root:
		if ulp != nil {
			t.Errorf("root with %s on disk: the module should autoload, got %v", mod, ulp)
		}
	default:
		notSupported(t, "unprivileged, module not loaded", ulp, "modprobe tls")
	}

	cc, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	allowed, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
	bbr := p.Congestion("bbr")
	switch {
	case bytes.Contains(cc, []byte("bbr")) && (root || bytes.Contains(allowed, []byte("bbr"))):
		if bbr != nil {
			t.Errorf("bbr available and allowed, but the probe says %v", bbr)
		}
	case bytes.Contains(cc, []byte("bbr")):
		notSupported(t, "bbr not allowed", bbr, "tcp_allowed_congestion_control")
	}
	if err := p.Congestion("no_such_cc"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("a congestion control that cannot exist: %v", err)
	}

	r := p.Run(Needs{KTLS: Require, Congestion: "bbr", CongestionMode: Require, QUIC: true, Steering: true, OpenFiles: 1000})
	var txt bytes.Buffer
	r.WriteText(&txt)
	t.Logf("host report:\n%s", txt.String())
	if r.OK != (ulp == nil && bbr == nil) {
		t.Errorf("report OK = %v with ULP %v and BBR %v", r.OK, ulp, bbr)
	}
	if ulp != nil && !strings.Contains(txt.String(), "fix: ") {
		t.Error("a failing check without a remedy line")
	}
}
