package vmtest

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// console wraps a test binary's -test.v output the way the serial console
// shows it: kernel and vmtest lines around it, CRLF line ends.
func console(testOutput string) string {
	s := "[    0.000000] Linux version 6.1.0-57-amd64\n" + markInit + " kernel 6.1.0-57-amd64, uptime 2.31\n" +
		"vmtest: ENGINE_REQUIRE_TOOLS=1\n" + testOutput + markResult + "PASS\n"
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// TestGuestReport: the host fails a VM run whose binary exited 0 when a
// test it asked for was skipped or never ran, and passes it only when
// every test that started passed.
func TestGuestReport(t *testing.T) {
	for _, tt := range []struct {
		name    string
		pattern string
		out     string
		want    []string // substrings, one per problem, in order
	}{
		{
			name:    "pass",
			pattern: "^TestKernelTLS$",
			out:     "=== RUN   TestKernelTLS\n    vm_linux_test.go:24: report:\n        ok\n--- PASS: TestKernelTLS (1.52s)\nPASS\n",
		},
		{
			name:    "skipped",
			pattern: "^TestKernelTLSPromotion$",
			out: "=== RUN   TestKernelTLSPromotion\n    ktls_vm_linux_test.go:179: openssl not installed: the AES-256-GCM and ChaCha20-Poly1305 promotions are not tested\n" +
				"--- SKIP: TestKernelTLSPromotion (3.10s)\nPASS\n",
			want: []string{"TestKernelTLSPromotion was skipped in the VM, where it must run: ktls_vm_linux_test.go:179: openssl not installed"},
		},
		{
			name:    "pattern matched nothing",
			pattern: "^TestKernelTLSRenamed$",
			out:     "testing: warning: no tests to run\nPASS\n",
			want:    []string{`no test ran in the VM: -test.run="^TestKernelTLSRenamed$" matched nothing`},
		},
		{
			name:    "asked-for test missing, another ran",
			pattern: "^TestKernelTLSBig$",
			out:     "=== RUN   TestKernelTLSBigAndKeyUpdate\n--- PASS: TestKernelTLSBigAndKeyUpdate (9.00s)\nPASS\n",
			want:    []string{`TestKernelTLSBig did not run in the VM: no "=== RUN" line for it`},
		},
		{
			name:    "fail",
			pattern: "^TestKernelTLS$",
			out:     "=== RUN   TestKernelTLS\n    vm_linux_test.go:40: report not OK\n--- FAIL: TestKernelTLS (1.00s)\nFAIL\n",
			want:    []string{"TestKernelTLS failed in the VM"},
		},
		{
			name:    "started, no result",
			pattern: "^TestKernelTLS$",
			out:     "=== RUN   TestKernelTLS\npanic: runtime error: index out of range\n",
			want:    []string{"TestKernelTLS started in the VM but printed no result"},
		},
		{
			// Real -test.v output: the parent's own log resumes under
			// "=== NAME", and subtest results follow the parent's.
			name:    "subtests",
			pattern: "^TestA$",
			out: "=== RUN   TestA\n    a_test.go:4: hello\n=== RUN   TestA/sub_one\n    a_test.go:5: no widget here\n" +
				"=== RUN   TestA/two\n    a_test.go:6: fine\n=== NAME  TestA\n    a_test.go:7: after\n--- PASS: TestA (0.00s)\n" +
				"    --- SKIP: TestA/sub_one (0.00s)\n    --- PASS: TestA/two (0.00s)\nPASS\n",
			want: []string{"TestA/sub_one was skipped in the VM, where it must run: a_test.go:5: no widget here"},
		},
		{
			name:    "one subtest asked for",
			pattern: "^TestA$/^two$",
			out:     "=== RUN   TestA\n=== RUN   TestA/two\n--- PASS: TestA (0.00s)\n    --- PASS: TestA/two (0.00s)\nPASS\n",
		},
		{
			name:    "subtest asked for, none matched",
			pattern: "^TestA$/^three$",
			out:     "=== RUN   TestA\n--- PASS: TestA (0.00s)\nPASS\n",
			want:    []string{"TestA/three did not run in the VM"},
		},
		{
			name:    "parallel tests",
			pattern: "^Test[BC]$",
			out: "=== RUN   TestB\n=== PAUSE TestB\n=== RUN   TestC\n=== PAUSE TestC\n=== CONT  TestB\n    a_test.go:9: broken\n--- FAIL: TestB (0.00s)\n" +
				"=== CONT  TestC\n    a_test.go:10: openssl not installed\n--- SKIP: TestC (0.00s)\nFAIL\n",
			want: []string{"TestB failed in the VM", "TestC was skipped in the VM, where it must run: a_test.go:10: openssl not installed"},
		},
		{
			name:    "result after output without a newline",
			pattern: "^TestKernelTLS$",
			out:     "=== RUN   TestKernelTLS\nno newline--- PASS: TestKernelTLS (0.50s)\nPASS\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := parseTestV(console(tt.out)).problems(tt.pattern, literalName(tt.pattern))
			ok := len(got) == len(tt.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.Contains(got[i], tt.want[i])
			}
			if !ok {
				t.Errorf("problems(%q) =\n\t%s\nwant one each containing\n\t%s", tt.pattern,
					strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
		})
	}
}

func TestLiteralName(t *testing.T) {
	for _, tt := range []struct{ pattern, want string }{
		{"^TestKernelTLS$", "TestKernelTLS"},
		{"^TestKernelTLSPromotion$/^promote_after=1MiB$", "TestKernelTLSPromotion/promote_after=1MiB"},
		{`^TestX$/^a\.b\(c\)$`, "TestX/a.b(c)"},
		{"^TestKernelTLS", ""},
		{"TestKernelTLS$", ""},
		{"^Test[BC]$", ""},
		{"^Test.*$", ""},
		{"", ""},
	} {
		if got := literalName(tt.pattern); got != tt.want {
			t.Errorf("literalName(%q) = %q, want %q", tt.pattern, got, tt.want)
		}
	}
	// RunPattern and literalName agree on names with metacharacters.
	for _, name := range []string{"TestX", "TestX/a.b", "TestX/x+y_(1)"} {
		p := strings.Split(name, "/")
		for i := range p {
			p[i] = "^" + regexp.QuoteMeta(p[i]) + "$"
		}
		if got := literalName(strings.Join(p, "/")); got != name {
			t.Errorf("literalName(%q) = %q, want %q", strings.Join(p, "/"), got, name)
		}
	}
}

func TestRequireEnv(t *testing.T) {
	got := requireEnv([]string{"PATH=/bin", "ENGINE_REQUIRE_VM=1", "ENGINE_VM_KERNEL_DIR=/k", "ENGINE_REQUIRE_TOOLS=1", "ENGINE_REQUIRE_EBPF="})
	want := []string{"ENGINE_REQUIRE_EBPF=", "ENGINE_REQUIRE_TOOLS=1", "ENGINE_REQUIRE_VM=1"}
	if !slices.Equal(got, want) {
		t.Errorf("requireEnv = %q, want %q", got, want)
	}
}
