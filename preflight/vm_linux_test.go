package preflight

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/vmtest"
	"github.com/mediaship/engine/ktls"
)

// TestKernelTLS runs every probe on a kernel with kernel TLS and requires
// all of them to pass: here when this kernel has kTLS, otherwise in the VM
// on Debian's stock kernel.
func TestKernelTLS(t *testing.T) {
	if !vmtest.OnKTLSKernel(t, vmtest.Options{}) {
		return
	}
	r := new(Prober).Run(Needs{KTLS: Require, Congestion: "bbr", CongestionMode: Require, QUIC: true, Steering: true, OpenFiles: 1000})
	var txt bytes.Buffer
	r.WriteText(&txt)
	t.Logf("report:\n%s", txt.String())
	for _, c := range r.Checks {
		if c.ID == "ktls.rekey" {
			// Rekey arrived in 6.14; older kernels must say so, not fail.
			if c.Status != OK && !strings.Contains(c.Reason, "EBUSY") {
				t.Errorf("rekey: %s %s", c.Status, c.Reason)
			}
			continue
		}
		if c.Status != OK {
			t.Errorf("%s: %s: %s", c.ID, c.Status, c.Reason)
		}
	}
	if !r.OK {
		t.Error("report not OK on a kernel with kernel TLS")
	}
	// Each suite separately, through the probe itself.
	p := new(Prober)
	for _, s := range ktls.Suites() {
		if err := p.KTLS(s); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

// TestKernelTLSWithoutModule boots the same kernel without tls.ko in the
// initramfs: the probes must report kernel TLS conclusively missing, and
// a config that requires it must fail.
func TestKernelTLSWithoutModule(t *testing.T) {
	if !vmtest.InVM() {
		// Always in the VM: the point is a kernel whose tls.ko is absent.
		res := vmtest.Run(t, vmtest.Options{Run: vmtest.RunPattern(t), Omit: []string{"tls"}})
		t.Logf("vmtest summary: %s: %s boot %v, boot to result %v", t.Name(), res.Accel,
			res.Boot.Round(time.Millisecond), res.Total.Round(time.Millisecond))
		return
	}
	p := new(Prober)
	err := p.TLSULP()
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("TLSULP without tls.ko: %v, want ErrNotSupported", err)
	}
	t.Logf("without tls.ko: %v", err)
	r := p.Run(Needs{KTLS: Require, Congestion: "bbr", CongestionMode: Require})
	var txt bytes.Buffer
	r.WriteText(&txt)
	t.Logf("report:\n%s", txt.String())
	if r.OK || r.Checks[0].Status != Fail || r.Checks[0].Remedy == "" {
		t.Errorf("report without tls.ko: OK=%v first check %+v", r.OK, r.Checks[0])
	}
	for _, c := range r.Checks {
		if c.ID == "tcp.congestion" && c.Status != OK {
			t.Errorf("BBR should still work: %s", c.Reason)
		}
	}
}
