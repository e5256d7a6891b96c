package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// allowance excuses a skip, but only on a machine that really lacks what
// the test needs: each is checked on the machine the tests just ran on.
// Missing tools (curl, openssl, h2load, wrk, b3sum, h2spec, pebble, nginx
// and its stream module, haproxy, lighttpd and its TLS module, Caddy at
// bench/compare's pinned version, gzip, brotli, zstd, qemu and the VM
// kernel) are never excused: .ci/run installs them, and
// ENGINE_REQUIRE_TOOLS (internal/testtool) and ENGINE_REQUIRE_VM make them failures anyway.
type allowance struct {
	test   string // the test's name; its subtests too; "" for any test
	reason string // a substring of the skip message
	// lacks says what the machine lacks, and false when it has it (so
	// the test should have run).
	lacks func(m *machine) (string, bool)
}

// allowlist is every skip a machine may excuse; README.md's "Tests that
// can skip, and where" lists them with the rest.
var allowlist = []allowance{
	{"TestSteeringByCPU", "needs at least 2 CPUs", func(m *machine) (string, bool) {
		return fmt.Sprintf("%d CPU", m.cpus), m.cpus < 2
	}},
	// ENGINE_REQUIRE_EBPF turns this into a failure; .ci/run sets it as
	// root, the only user that can attach the program.
	{"TestSteeringByCPU", "eBPF steering not available", func(m *machine) (string, bool) {
		return "not root: eBPF programs need CAP_BPF and CAP_NET_ADMIN", m.euid != 0
	}},
	{"TestSteerQUIC", "eBPF steering not available", func(m *machine) (string, bool) {
		return "not root: eBPF programs need CAP_BPF and CAP_NET_ADMIN", m.euid != 0
	}},
	{"TestBulkPolicy", "this kernel has no BBR", func(m *machine) (string, bool) {
		b, _ := m.readFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
		return "no bbr in tcp_available_congestion_control", !strings.Contains(string(b), "bbr")
	}},
	// Tests of the userspace fallback, for kernels without kTLS.
	{"TestTLSAutoWithoutKTLS", "this kernel has kernel TLS", hasKTLS},
	{"TestServeRefusesMissingKTLS", "this kernel has kernel TLS", hasKTLS},
	{"TestHashOnce", "no sparse files here", func(m *machine) (string, bool) {
		err := m.sparse()
		return fmt.Sprintf("the temporary directory takes no sparse files (%v)", err), err != nil
	}},
	{"TestAcceptOutOfDescriptors", "cannot lower RLIMIT_NOFILE", func(m *machine) (string, bool) {
		err := m.lowerNofile()
		return fmt.Sprintf("RLIMIT_NOFILE cannot be lowered here (%v)", err), err != nil
	}},
	// vmtest boots an x86-64 kernel.
	{"", "needs a linux/amd64 host", func(m *machine) (string, bool) {
		return "a " + m.goos + "/" + m.goarch + " host", m.goos != "linux" || m.goarch != "amd64"
	}},
	// Long tests that skip under -short, when GOFLAGS asks for it.
	{"", "-short", func(m *machine) (string, bool) {
		return "GOFLAGS has -short", strings.Contains(m.goflags, "-short")
	}},
}

func hasKTLS(m *machine) (string, bool) {
	b, _ := m.readFile("/proc/sys/net/ipv4/tcp_available_ulp")
	return "this kernel has kernel TLS (tls in tcp_available_ulp)", strings.Contains(string(b), "tls")
}

// excused says whether machine m excuses skip s, and why.
func excused(s skip, m *machine) (string, bool) {
	for _, a := range allowlist {
		if a.test != "" && s.test != a.test && !strings.HasPrefix(s.test, a.test+"/") {
			continue
		}
		if !strings.Contains(s.reason, a.reason) {
			continue
		}
		if why, ok := a.lacks(m); ok {
			return why, true
		}
	}
	return "", false
}

// machine is what the allowlist asks about the machine the tests ran on.
type machine struct {
	cpus         int
	euid         int
	goos, goarch string
	goflags      string
	readFile     func(string) ([]byte, error)
	sparse       func() error // nil when a 2 GiB sparse file can be made
	lowerNofile  func() error // nil when the RLIMIT_NOFILE soft limit can be lowered
}

func probeMachine() *machine {
	return &machine{
		cpus:        runtime.NumCPU(),
		euid:        os.Geteuid(),
		goos:        runtime.GOOS,
		goarch:      runtime.GOARCH,
		goflags:     os.Getenv("GOFLAGS"),
		readFile:    os.ReadFile,
		sparse:      sparseFile,
		lowerNofile: lowerNofile,
	}
}

// sparseFile makes what TestHashOnce makes: 2 GiB of holes in the
// temporary directory.
func sparseFile() error {
	f, err := os.CreateTemp("", "testreport-sparse-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return f.Truncate(2 << 30)
}
