package vmtest

import (
	"fmt"
	"regexp"
	"strings"
)

// A guest's verdict is its test binary's exit code, and a test that skips
// exits 0 as surely as one that passes. So the host also reads the
// guest's -test.v output from the console and counts a run as passed only
// when every test it started passed, and the test asked for by name ran.

// guestReport is what the guest's -test.v output said about each test.
type guestReport struct {
	order []string // test names, in the order they started
	tests map[string]*guestTest
}

// guestTest is one test (or subtest) in a guestReport.
type guestTest struct {
	result string   // "PASS", "FAIL" or "SKIP"; "" when none was printed
	log    []string // its own output (t.Log, t.Skip's message), trimmed
}

var (
	// "=== RUN   TestX/sub", and PAUSE, CONT, NAME: which test the next
	// lines belong to. Test names hold no spaces (testing rewrites them).
	runLine = regexp.MustCompile(`=== (RUN|PAUSE|CONT|NAME) +(\S+)\s*$`)
	// "--- SKIP: TestX/sub (0.00s)", indented for subtests. Not anchored
	// at the start: output printed without a newline may precede it.
	resultLine = regexp.MustCompile(`--- (PASS|FAIL|SKIP): (\S+) \([0-9.]+s\)\s*$`)
)

// parseTestV reads the output of a test binary run with -test.v.
func parseTestV(out string) *guestReport {
	r := &guestReport{tests: map[string]*guestTest{}}
	get := func(name string) *guestTest {
		g := r.tests[name]
		if g == nil {
			g = &guestTest{}
			r.tests[name] = g
			r.order = append(r.order, name)
		}
		return g
	}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if m := runLine.FindStringSubmatch(l); m != nil {
			cur = m[2]
			get(cur)
			continue
		}
		if m := resultLine.FindStringSubmatch(l); m != nil {
			get(m[2]).result = m[1]
			continue
		}
		if cur != "" && strings.HasPrefix(l, "    ") {
			// Test output is indented; the console's own lines
			// (kernel, vmtest, "PASS") are not.
			get(cur).log = append(get(cur).log, strings.TrimSpace(l))
		}
	}
	return r
}

// reason is the last line a test logged: for a skip, its message.
func (g *guestTest) reason() string {
	if len(g.log) == 0 {
		return "no message"
	}
	return g.log[len(g.log)-1]
}

// problems lists why the run does not count as passed: no test ran, the
// test named want (empty for none) did not run, or a test that started
// was skipped, failed or printed no result. pattern is the -test.run
// pattern, for the messages.
func (r *guestReport) problems(pattern, want string) []string {
	var p []string
	if len(r.order) == 0 {
		return []string{fmt.Sprintf("no test ran in the VM: -test.run=%q matched nothing", pattern)}
	}
	if want != "" && r.tests[want] == nil {
		p = append(p, fmt.Sprintf("%s did not run in the VM: no \"=== RUN\" line for it (-test.run=%q)", want, pattern))
	}
	for _, name := range r.order {
		switch g := r.tests[name]; g.result {
		case "PASS":
		case "SKIP":
			p = append(p, fmt.Sprintf("%s was skipped in the VM, where it must run: %s", name, g.reason()))
		case "FAIL":
			p = append(p, fmt.Sprintf("%s failed in the VM", name))
		default:
			p = append(p, fmt.Sprintf("%s started in the VM but printed no result", name))
		}
	}
	return p
}

// literalName returns the test name a pattern made by RunPattern selects
// exactly ("^TestX$/^a_b$" gives "TestX/a_b"), or "" for any other
// pattern.
func literalName(pattern string) string {
	if pattern == "" {
		return ""
	}
	parts := strings.Split(pattern, "/")
	for i, p := range parts {
		inner, ok1 := strings.CutPrefix(p, "^")
		inner, ok2 := strings.CutSuffix(inner, "$")
		if !ok1 || !ok2 || inner == "" {
			return ""
		}
		var lit strings.Builder
		for j := 0; j < len(inner); j++ {
			if inner[j] == '\\' && j+1 < len(inner) {
				j++
			}
			lit.WriteByte(inner[j])
		}
		if regexp.QuoteMeta(lit.String()) != inner {
			return ""
		}
		parts[i] = lit.String()
	}
	return strings.Join(parts, "/")
}
