package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "filter":
		fs := flag.NewFlagSet("filter", flag.ExitOnError)
		show := fs.String("show", "", "also print test output lines matching this regexp")
		skips := fs.String("skips", "", "append skipped tests to this file")
		quiet := fs.Bool("quiet", false, "leave out packages with no tests, or none selected")
		fs.Parse(os.Args[2:])
		f := &filter{out: os.Stdout, quiet: *quiet}
		if *show != "" {
			f.show = regexp.MustCompile(*show)
		}
		if *skips != "" {
			w, err := os.OpenFile(*skips, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				fatal(err)
			}
			defer w.Close()
			f.skips = w
		}
		if err := f.run(os.Stdin); err != nil {
			fatal(err)
		}
		if f.failed {
			os.Exit(1)
		}
	case "skips":
		fs := flag.NewFlagSet("skips", flag.ExitOnError)
		strict := fs.Bool("strict", false, "fail unless every skip is allowed on this machine")
		fs.Parse(os.Args[2:])
		if fs.NArg() != 1 {
			usage()
		}
		b, err := os.ReadFile(fs.Arg(0))
		if err != nil && !os.IsNotExist(err) {
			fatal(err)
		}
		if !report(os.Stdout, parseSkips(string(b)), probeMachine(), *strict) {
			os.Exit(1)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testreport filter [-show REGEXP] [-skips FILE] [-quiet] < go-test-json\n       testreport skips [-strict] FILE")
	os.Exit(2)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testreport:", err)
	os.Exit(2)
}

// event is one line of go test -json (cmd/test2json), with the build
// events go test adds.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

// filter turns go test -json into go test's plain output.
type filter struct {
	out   io.Writer
	show  *regexp.Regexp // nil: none
	skips io.Writer      // nil: not recorded
	quiet bool

	buf    map[string][]string // each running test's output, by package and name
	order  []string            // keys of buf, in the order the tests started
	failed bool
	// benches are the benchmarks running in each package, in the order
	// they started. A benchmark that passes gets no event of its own:
	// it is over when a benchmark that is not one of its subbenchmarks
	// starts, or when its package prints its result.
	benches map[string][]string
}

func (f *filter) run(r io.Reader) error {
	f.buf = map[string][]string{}
	f.benches = map[string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(f.out, sc.Text()) // not from go test -json: pass it on
			continue
		}
		f.event(e)
	}
	// Output of tests that never finished (the binary crashed or timed
	// out): show it, it is the only account of what happened.
	for _, k := range f.order {
		if lines, ok := f.buf[k]; ok {
			fmt.Fprint(f.out, strings.Join(lines, ""))
		}
	}
	return sc.Err()
}

func (f *filter) event(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "build-output":
		fmt.Fprint(f.out, e.Output)
	case "build-fail":
		f.failed = true
	case "run":
		if strings.HasPrefix(e.Test, "Benchmark") {
			f.benchesDone(e.Package, e.Test)
			f.benches[e.Package] = append(f.benches[e.Package], e.Test)
		}
	case "output":
		if e.Test == "" {
			if l := e.Output; strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "ok ") {
				f.benchesDone(e.Package, "") // the package's result: its benchmarks are over
			}
			f.packageOutput(e.Output)
			return
		}
		if _, ok := f.buf[key]; !ok {
			f.order = append(f.order, key)
		}
		f.buf[key] = append(f.buf[key], e.Output)
		if f.show != nil && f.show.MatchString(strings.TrimRight(e.Output, "\n")) {
			fmt.Fprint(f.out, e.Output)
		}
	case "pass", "skip", "fail":
		if e.Test == "" {
			f.benchesDone(e.Package, "")
			if e.Action == "fail" {
				f.failed = true
			}
			return
		}
		lines := f.buf[key]
		delete(f.buf, key)
		switch e.Action {
		case "fail":
			f.failed = true
			fmt.Fprint(f.out, strings.Join(lines, ""))
		case "skip":
			if f.skips != nil {
				fmt.Fprintf(f.skips, "%s\t%s\t%s\n", e.Package, e.Test, skipReason(lines, e.Test))
			}
		}
	}
}

// benchesDone ends the benchmarks of pkg that are running, but those
// that next, a benchmark starting, is a subbenchmark of ("" ends them
// all), and prints their results as go test does without -v: what they
// printed, but the "=== RUN" lines and their bare names. One that
// skipped or failed has had its event already (and its output is gone).
func (f *filter) benchesDone(pkg, next string) {
	open := f.benches[pkg]
	kept := open[:0]
	for _, name := range open {
		if next != "" && strings.HasPrefix(next, name+"/") {
			kept = append(kept, name)
			continue
		}
		key := pkg + "\x00" + name
		for _, l := range f.buf[key] {
			if !strings.HasPrefix(l, "=== ") && l != name+"\n" {
				fmt.Fprint(f.out, l)
			}
		}
		delete(f.buf, key)
	}
	f.benches[pkg] = kept
}

// packageOutput prints a package's own lines as go test does without -v:
// "ok", "FAIL", "?", and whatever the binary printed outside any test.
func (f *filter) packageOutput(s string) {
	line := strings.TrimRight(s, "\n")
	switch {
	case line == "PASS", line == "testing: warning: no tests to run":
		return
	case f.quiet && (strings.HasSuffix(line, "[no test files]") || strings.HasSuffix(line, "[no tests to run]")):
		return
	}
	fmt.Fprint(f.out, s)
}

// skipReason is the last line a skipped test logged before "--- SKIP":
// t.Skip's message, with its file and line. A benchmark's bare name (the
// line go test prints as it starts one) is not a reason.
func skipReason(lines []string, test string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || l == test || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		return strings.Join(strings.Fields(l), " ") // one line for the skips file
	}
	return "(no message)"
}

// skip is one skipped test, as filter recorded it.
type skip struct{ pkg, test, reason string }

func parseSkips(s string) []skip {
	var out []skip
	for _, l := range strings.Split(s, "\n") {
		if f := strings.SplitN(l, "\t", 3); len(f) == 3 {
			out = append(out, skip{f[0], f[1], f[2]})
		}
	}
	return out
}

// report lists the skips and whether this machine excuses each one. It
// returns false when strict and a skip is not excused.
func report(w io.Writer, skips []skip, m *machine, strict bool) bool {
	if len(skips) == 0 {
		fmt.Fprintln(w, "no test skipped")
		return true
	}
	fmt.Fprintf(w, "%d skipped:\n", len(skips))
	bad := 0
	for _, s := range skips {
		why, ok := excused(s, m)
		mark := "allowed: " + why
		if !ok {
			bad++
			mark = "NOT ALLOWED: this machine could run it"
		}
		fmt.Fprintf(w, "  %s %s: %s\n      [%s]\n", s.pkg, s.test, s.reason, mark)
	}
	if strict && bad > 0 {
		fmt.Fprintf(w, "ENGINE_REQUIRE_NO_SKIP is set and %d of them skipped for a reason this machine does not excuse:\n"+
			"install what the reason names, or, if it is a capability such machines lack, add it to internal/testreport/allow.go.\n", bad)
		return false
	}
	return true
}
