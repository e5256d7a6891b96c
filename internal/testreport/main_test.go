package main

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// goTestJSON is go test -json for a package with a passing test whose
// subtest skips, a failing test and a skipped test (times removed).
const goTestJSON = `{"Action":"start","Package":"tv"}
{"Action":"run","Package":"tv","Test":"TestA"}
{"Action":"output","Package":"tv","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"tv","Test":"TestA","Output":"    a_test.go:4: hello\n"}
{"Action":"run","Package":"tv","Test":"TestA/sub_one"}
{"Action":"output","Package":"tv","Test":"TestA/sub_one","Output":"=== RUN   TestA/sub_one\n"}
{"Action":"output","Package":"tv","Test":"TestA/sub_one","Output":"    a_test.go:5: no widget here\n"}
{"Action":"output","Package":"tv","Test":"TestA/sub_one","Output":"--- SKIP: TestA/sub_one (0.00s)\n"}
{"Action":"skip","Package":"tv","Test":"TestA/sub_one","Elapsed":0}
{"Action":"run","Package":"tv","Test":"TestA/two"}
{"Action":"output","Package":"tv","Test":"TestA/two","Output":"=== RUN   TestA/two\n"}
{"Action":"output","Package":"tv","Test":"TestA/two","Output":"    a_test.go:6: vmtest summary: fine\n"}
{"Action":"output","Package":"tv","Test":"TestA/two","Output":"--- PASS: TestA/two (0.00s)\n"}
{"Action":"pass","Package":"tv","Test":"TestA/two","Elapsed":0}
{"Action":"output","Package":"tv","Test":"TestA","Output":"    a_test.go:7: after\n"}
{"Action":"output","Package":"tv","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"tv","Test":"TestA","Elapsed":0}
{"Action":"run","Package":"tv","Test":"TestB"}
{"Action":"output","Package":"tv","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"tv","Test":"TestB","Output":"=== PAUSE TestB\n"}
{"Action":"pause","Package":"tv","Test":"TestB"}
{"Action":"run","Package":"tv","Test":"TestC"}
{"Action":"output","Package":"tv","Test":"TestC","Output":"=== RUN   TestC\n"}
{"Action":"output","Package":"tv","Test":"TestC","Output":"=== PAUSE TestC\n"}
{"Action":"pause","Package":"tv","Test":"TestC"}
{"Action":"cont","Package":"tv","Test":"TestB"}
{"Action":"output","Package":"tv","Test":"TestB","Output":"=== CONT  TestB\n"}
{"Action":"output","Package":"tv","Test":"TestB","Output":"    a_test.go:9: broken\n"}
{"Action":"output","Package":"tv","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}
{"Action":"fail","Package":"tv","Test":"TestB","Elapsed":0}
{"Action":"cont","Package":"tv","Test":"TestC"}
{"Action":"output","Package":"tv","Test":"TestC","Output":"=== CONT  TestC\n"}
{"Action":"output","Package":"tv","Test":"TestC","Output":"    a_test.go:10: openssl not installed\n"}
{"Action":"output","Package":"tv","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}
{"Action":"skip","Package":"tv","Test":"TestC","Elapsed":0}
{"Action":"output","Package":"tv","Output":"FAIL\n"}
{"Action":"output","Package":"tv","Output":"FAIL\ttv\t0.003s\n"}
{"Action":"fail","Package":"tv","Elapsed":0.004}
{"Action":"start","Package":"empty"}
{"Action":"output","Package":"empty","Output":"?   \tempty\t[no test files]\n"}
{"Action":"skip","Package":"empty","Elapsed":0}
`

func TestFilter(t *testing.T) {
	var out, skips strings.Builder
	f := &filter{out: &out, skips: &skips}
	if err := f.run(strings.NewReader(goTestJSON)); err != nil {
		t.Fatal(err)
	}
	want := "=== RUN   TestB\n=== PAUSE TestB\n=== CONT  TestB\n    a_test.go:9: broken\n--- FAIL: TestB (0.00s)\n" +
		"FAIL\nFAIL\ttv\t0.003s\n?   \tempty\t[no test files]\n"
	if out.String() != want || !f.failed {
		t.Errorf("output (failed %v):\n%s\nwant (failed true):\n%s", f.failed, out.String(), want)
	}
	wantSkips := "tv\tTestA/sub_one\ta_test.go:5: no widget here\ntv\tTestC\ta_test.go:10: openssl not installed\n"
	if skips.String() != wantSkips {
		t.Errorf("skips:\n%s\nwant:\n%s", skips.String(), wantSkips)
	}
}

func TestFilterShowAndQuiet(t *testing.T) {
	var out strings.Builder
	f := &filter{out: &out, quiet: true}
	f.show = regexp.MustCompile(`vmtest summary|^--- `)
	in := strings.ReplaceAll(goTestJSON, `"TestB","Output":"    a_test.go:9: broken\n"}`, `"TestB","Output":"    a_test.go:9: fine\n"}`)
	in = strings.ReplaceAll(in, `"fail"`, `"pass"`)
	in = strings.ReplaceAll(in, `--- FAIL`, `--- PASS`)
	in = strings.ReplaceAll(in, `"FAIL\n"`, `"PASS\n"`)
	in = strings.ReplaceAll(in, `"FAIL\ttv`, `"ok  \ttv`)
	in += "not json\n"
	if err := f.run(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	// test2json does not indent a subtest's result line.
	want := "--- SKIP: TestA/sub_one (0.00s)\n    a_test.go:6: vmtest summary: fine\n--- PASS: TestA/two (0.00s)\n" +
		"--- PASS: TestA (0.00s)\n--- PASS: TestB (0.00s)\n--- SKIP: TestC (0.00s)\nok  \ttv\t0.003s\nnot json\n"
	if out.String() != want || f.failed {
		t.Errorf("output (failed %v):\n%s\nwant (failed false):\n%s", f.failed, out.String(), want)
	}
}

// TestFilterUnfinished: a test binary that crashed leaves tests without a
// result; their output is printed, and a build failure fails the run.
func TestFilterUnfinished(t *testing.T) {
	var out strings.Builder
	f := &filter{out: &out}
	in := `{"ImportPath":"tv [tv.test]","Action":"build-output","Output":"./b_test.go:2:12: undefined: undefined\n"}
{"ImportPath":"tv [tv.test]","Action":"build-fail"}
{"Action":"run","Package":"p","Test":"TestHang"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"panic: test timed out after 15m0s\n"}
`
	if err := f.run(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	want := "./b_test.go:2:12: undefined: undefined\n=== RUN   TestHang\npanic: test timed out after 15m0s\n"
	if out.String() != want || !f.failed {
		t.Errorf("output (failed %v):\n%s\nwant (failed true):\n%s", f.failed, out.String(), want)
	}
}

// benchJSON is go test -json -run='^$' -bench=. for a package whose
// benchmarks pass (one with subbenchmarks, one that logs), skip (with a
// reason, in a subbenchmark, and without one) and fail. A benchmark that
// passes gets no event of its own.
const benchJSON = `{"Action":"start","Package":"bv"}
{"Action":"output","Package":"bv","Output":"goos: linux\n"}
{"Action":"run","Package":"bv","Test":"BenchmarkA"}
{"Action":"output","Package":"bv","Test":"BenchmarkA","Output":"=== RUN   BenchmarkA\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkA","Output":"BenchmarkA\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkA","Output":"BenchmarkA-2       \t"}
{"Action":"output","Package":"bv","Test":"BenchmarkA","Output":"       1\t       345.0 ns/op\n"}
{"Action":"run","Package":"bv","Test":"BenchmarkSkip"}
{"Action":"output","Package":"bv","Test":"BenchmarkSkip","Output":"=== RUN   BenchmarkSkip\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSkip","Output":"BenchmarkSkip\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSkip","Output":"    a_test.go:4: xyz not installed\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSkip","Output":"--- SKIP: BenchmarkSkip\n"}
{"Action":"skip","Package":"bv","Test":"BenchmarkSkip"}
{"Action":"run","Package":"bv","Test":"BenchmarkSub"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub","Output":"=== RUN   BenchmarkSub\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub","Output":"BenchmarkSub\n"}
{"Action":"run","Package":"bv","Test":"BenchmarkSub/one"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/one","Output":"=== RUN   BenchmarkSub/one\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/one","Output":"BenchmarkSub/one\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/one","Output":"    a_test.go:5: sub skip reason\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/one","Output":"--- SKIP: BenchmarkSub/one\n"}
{"Action":"skip","Package":"bv","Test":"BenchmarkSub/one"}
{"Action":"run","Package":"bv","Test":"BenchmarkSub/two"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/two","Output":"=== RUN   BenchmarkSub/two\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/two","Output":"BenchmarkSub/two\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/two","Output":"BenchmarkSub/two-2 \t"}
{"Action":"output","Package":"bv","Test":"BenchmarkSub/two","Output":"       1\t       269.0 ns/op\n"}
{"Action":"run","Package":"bv","Test":"BenchmarkQuiet"}
{"Action":"output","Package":"bv","Test":"BenchmarkQuiet","Output":"=== RUN   BenchmarkQuiet\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkQuiet","Output":"BenchmarkQuiet\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkQuiet","Output":"--- SKIP: BenchmarkQuiet\n"}
{"Action":"skip","Package":"bv","Test":"BenchmarkQuiet"}
{"Action":"run","Package":"bv","Test":"BenchmarkFail"}
{"Action":"output","Package":"bv","Test":"BenchmarkFail","Output":"=== RUN   BenchmarkFail\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkFail","Output":"BenchmarkFail\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkFail","Output":"    a_test.go:7: broken\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkFail","Output":"--- FAIL: BenchmarkFail\n"}
{"Action":"fail","Package":"bv","Test":"BenchmarkFail"}
{"Action":"run","Package":"bv","Test":"BenchmarkLog"}
{"Action":"output","Package":"bv","Test":"BenchmarkLog","Output":"=== RUN   BenchmarkLog\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkLog","Output":"BenchmarkLog\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkLog","Output":"    a_test.go:8: logged\n"}
{"Action":"output","Package":"bv","Test":"BenchmarkLog","Output":"BenchmarkLog-2     \t"}
{"Action":"output","Package":"bv","Test":"BenchmarkLog","Output":"       1\t       442.0 ns/op\n"}
{"Action":"output","Package":"bv","Output":"FAIL\n"}
{"Action":"output","Package":"bv","Output":"FAIL\tbv\t0.121s\n"}
{"Action":"fail","Package":"bv"}
`

// TestFilterBenchmarks: benchmarks are reported as go test reports them
// without -v (their result lines, and the whole output of one that
// failed), and those that skip are recorded with their reasons, as tests
// are.
func TestFilterBenchmarks(t *testing.T) {
	var out, skips strings.Builder
	f := &filter{out: &out, skips: &skips}
	if err := f.run(strings.NewReader(benchJSON)); err != nil {
		t.Fatal(err)
	}
	want := "goos: linux\nBenchmarkA-2       \t       1\t       345.0 ns/op\nBenchmarkSub/two-2 \t       1\t       269.0 ns/op\n" +
		"=== RUN   BenchmarkFail\nBenchmarkFail\n    a_test.go:7: broken\n--- FAIL: BenchmarkFail\n" +
		"    a_test.go:8: logged\nBenchmarkLog-2     \t       1\t       442.0 ns/op\nFAIL\nFAIL\tbv\t0.121s\n"
	if out.String() != want || !f.failed {
		t.Errorf("output (failed %v):\n%s\nwant (failed true):\n%s", f.failed, out.String(), want)
	}
	wantSkips := "bv\tBenchmarkSkip\ta_test.go:4: xyz not installed\nbv\tBenchmarkSub/one\ta_test.go:5: sub skip reason\n" +
		"bv\tBenchmarkQuiet\t(no message)\n"
	if skips.String() != wantSkips {
		t.Errorf("skips:\n%s\nwant:\n%s", skips.String(), wantSkips)
	}
}

// linuxBox is a machine with every capability the allowlist asks about.
func linuxBox() *machine {
	files := map[string]string{
		"/proc/sys/net/ipv4/tcp_available_congestion_control": "reno bbr cubic\n",
		"/proc/sys/net/ipv4/tcp_available_ulp":                "mptcp\n",
	}
	return &machine{
		cpus: 2, euid: 0, goos: "linux", goarch: "amd64",
		readFile: func(p string) ([]byte, error) {
			if s, ok := files[p]; ok {
				return []byte(s), nil
			}
			return nil, os.ErrNotExist
		},
		sparse:      func() error { return nil },
		lowerNofile: func() error { return nil },
	}
}

// TestExcused: a skip is excused only where the machine lacks what the
// test needs; the same skip on a machine that has it is not.
func TestExcused(t *testing.T) {
	for _, tt := range []struct {
		test, reason string
		lacking      func(m *machine) // makes the machine lack it
	}{
		{"TestSteeringByCPU", "reactor_linux_test.go:72: needs at least 2 CPUs", func(m *machine) { m.cpus = 1 }},
		{"TestSteeringByCPU", "reactor_linux_test.go:79: eBPF steering not available here (SO_REUSEPORT hash)", func(m *machine) { m.euid = 1000 }},
		{"TestBulkPolicy", "lifecycle_linux_test.go:326: this kernel has no BBR (tcp_available_congestion_control)", func(m *machine) {
			m.readFile = func(string) ([]byte, error) { return []byte("reno cubic\n"), nil }
		}},
		{"TestTLSAutoWithoutKTLS", "tls_test.go:274: this kernel has kernel TLS", func(m *machine) {
			m.readFile = func(string) ([]byte, error) { return []byte("mptcp tls\n"), nil }
		}},
		{"TestServeRefusesMissingKTLS", "preflight_test.go:69: this kernel has kernel TLS (<nil>); the refusal needs one without", func(m *machine) {
			m.readFile = func(string) ([]byte, error) { return []byte("tls\n"), nil }
		}},
		{"TestHashOnce", "hardening_test.go:589: no sparse files here: file too large", func(m *machine) { m.sparse = func() error { return errors.New("file too large") } }},
		{"TestAcceptOutOfDescriptors", "reactor_linux_test.go:144: cannot lower RLIMIT_NOFILE: operation not permitted", func(m *machine) {
			m.lowerNofile = func() error { return errors.New("operation not permitted") }
		}},
		{"TestKernelTLS", "host.go:59: real-kernel VM test not run: needs a linux/amd64 host (install: ...)", func(m *machine) { m.goarch = "arm64" }},
		{"TestQuick", "compare_test.go:17: -short", func(m *machine) { m.goflags = "-short -count=1" }},
	} {
		s := skip{"pkg", tt.test, tt.reason}
		if why, ok := excused(s, linuxBox()); ok {
			t.Errorf("%s %q excused (%s) on a machine that has what it needs", tt.test, tt.reason, why)
		}
		m := linuxBox()
		tt.lacking(m)
		if why, ok := excused(s, m); !ok || why == "" {
			t.Errorf("%s %q not excused on a machine that lacks what it needs", tt.test, tt.reason)
		}
		// A reason excuses only the test it belongs to.
		if tt.test != "TestKernelTLS" && tt.test != "TestQuick" {
			if _, ok := excused(skip{"pkg", "TestOther", tt.reason}, m); ok {
				t.Errorf("%q excused TestOther too", tt.reason)
			}
		}
	}
	// Missing tools are never excused.
	for _, reason := range []string{
		"helpers_test.go:45: h2load not installed; install it (apt-get install nghttp2-client) to run this test",
		"integrity_test.go:80: b3sum not installed: apt-get install b3sum",
		"ktls_vm_linux_test.go:179: openssl not installed: the AES-256-GCM and ChaCha20-Poly1305 promotions are not tested",
		"host.go:59: real-kernel VM test not run: qemu-system-x86_64 not found (install: apt-get install ...)",
	} {
		m := linuxBox()
		m.cpus, m.euid, m.goarch = 1, 1000, "arm64"
		if why, ok := excused(skip{"pkg", "TestAny", reason}, m); ok {
			t.Errorf("%q excused (%s)", reason, why)
		}
	}
}

func TestReport(t *testing.T) {
	skips := parseSkips("engine/reactor\tTestSteeringByCPU\treactor_linux_test.go:72: needs at least 2 CPUs\n" +
		"engine\tTestCurl\thelpers_test.go:45: curl not installed; install it (apt-get install curl) to run this test\n")
	if len(skips) != 2 || skips[1].test != "TestCurl" {
		t.Fatalf("parseSkips: %+v", skips)
	}
	one := linuxBox()
	one.cpus = 1
	for _, tt := range []struct {
		skips  []skip
		strict bool
		ok     bool
		says   []string
	}{
		{nil, true, true, []string{"no test skipped"}},
		{skips[:1], true, true, []string{"1 skipped", "TestSteeringByCPU", "allowed: 1 CPU"}},
		{skips, false, true, []string{"2 skipped", "TestCurl: helpers_test.go:45: curl not installed", "NOT ALLOWED"}},
		{skips, true, false, []string{"NOT ALLOWED", "ENGINE_REQUIRE_NO_SKIP is set and 1 of them"}},
	} {
		var out strings.Builder
		ok := report(&out, tt.skips, one, tt.strict)
		for _, s := range tt.says {
			if !strings.Contains(out.String(), s) {
				t.Errorf("report(%d skips, strict %v) says:\n%s\nwant it to say %q", len(tt.skips), tt.strict, out.String(), s)
			}
		}
		if ok != tt.ok {
			t.Errorf("report(%d skips, strict %v) = %v, want %v", len(tt.skips), tt.strict, ok, tt.ok)
		}
	}
}
