package vmtest

import (
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Options describe one VM run.
type Options struct {
	// Run is the -test.run pattern for the tests inside the VM.
	Run string
	// Modules are the kernel modules /init loads, dependencies first by
	// itself. Nil means DefaultModules.
	Modules []string
	// Omit leaves modules out of the initramfs altogether, so not even
	// the kernel's own request_module finds them ("tls" to show what a
	// kernel without kernel TLS looks like).
	Omit []string
	// Params reach the guest as Param(key).
	Params map[string]string
	// Binaries are host programs (openssl, say) copied into the VM at the
	// same paths, with the shared libraries ldd says they need.
	Binaries []string
	// Timeout bounds the whole guest run. Zero means 10 minutes.
	Timeout time.Duration
}

// DefaultModules are what kernel TLS and BBR need. Without udev nothing
// loads aesni_intel or ghash_clmulni_intel (they are matched by CPU
// features, never requested by name), and kTLS would silently use the
// generic AES; so they are loaded explicitly.
var DefaultModules = []string{
	"tls", "tcp_bbr", "cryptd", "crypto_simd", "aesni_intel", "ghash_clmulni_intel",
	"gf128mul", "ghash_generic", "ctr", "gcm",
	"libchacha", "chacha_x86_64", "chacha_generic", "libpoly1305", "poly1305_x86_64",
	"poly1305_generic", "chacha20poly1305",
}

// Result is what a VM run produced.
type Result struct {
	Output string        // the serial console, as printed
	Accel  string        // "kvm" or "tcg"
	Boot   time.Duration // qemu start to /init running
	Total  time.Duration // qemu start to the tests' verdict
}

// InVM reports whether this test binary is running as /init in the VM.
func InVM() bool { return os.Getpid() == 1 }

// Param returns the value Options.Params gave key, inside the VM.
func Param(key string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "vmtest.p."+key+"="); ok {
			d, err := hex.DecodeString(v)
			if err == nil {
				return string(d)
			}
		}
	}
	return ""
}

// Main is a TestMain for packages with VM tests: inside the VM it sets
// the machine up, runs the selected tests and powers off; elsewhere it
// runs the tests as usual.
func Main(m *testing.M) { os.Exit(RunMain(m)) }

// RunMain is Main for a TestMain with work of its own after the tests:
// inside the VM it does not return; elsewhere it returns m.Run()'s code.
func RunMain(m *testing.M) int {
	if isGuest() {
		guestMain(m) // does not return
	}
	return m.Run()
}

// Markers on the serial console.
const (
	markInit   = "VMTEST INIT"
	markResult = "VMTEST RESULT: "
)

// OnKTLSKernel arranges for the calling test to run on a kernel with
// kernel TLS. It returns true when the test's body must run now: inside
// the VM, or on a host whose own kernel has kTLS. Otherwise it boots the
// VM with this same test and returns false; the caller then returns.
//
//	if !vmtest.OnKTLSKernel(t, vmtest.Options{}) { return }
func OnKTLSKernel(t *testing.T, o Options) bool {
	t.Helper()
	if InVM() || hostHasKTLS() {
		return true
	}
	if o.Run == "" {
		o.Run = RunPattern(t)
	}
	res := Run(t, o)
	t.Logf("vmtest summary: %s: %s boot %v, boot to result %v", t.Name(), res.Accel,
		res.Boot.Round(time.Millisecond), res.Total.Round(time.Millisecond))
	return false
}

// RunPattern is the -test.run pattern that selects exactly t.
func RunPattern(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
