// Command testreport keeps scripts/test.sh's output readable while it
// runs go test -json, and accounts for every skipped test.
//
//	go test -json ./... | testreport filter [-show REGEXP] [-skips FILE] [-quiet]
//	testreport skips [-strict] FILE
//
// filter prints what go test prints without -v (a line per package, a
// benchmark's results, and the whole output of a test that failed) plus
// the lines matching -show, appends each skipped test or benchmark with
// its reason to FILE, and exits 1 when a test, package or build failed. skips lists those tests at the end of the
// run; with -strict (ENGINE_REQUIRE_NO_SKIP=1) it fails unless every skip
// is for a capability this machine really lacks (allowlist in allow.go).
// It does not run tests or decide what passes: go test's exit status
// still does.
//
// Invariant: a skip is excused only by an allowlist entry whose check,
// made on the machine the tests just ran on, finds the capability really
// missing; a reason string alone never excuses it.
package main
