#!/usr/bin/env bash
# The whole test suite: the README's second command, and what CI runs
# (through .ci/run, after installing what the tests need).
#
# go test runs with -json through internal/testreport, which prints what
# go test prints without -v (a line per package, the whole output of a
# failing test) and records every skipped test and benchmark. The skips
# are listed at the end; with ENGINE_REQUIRE_NO_SKIP=1 (CI) a skip fails
# the run unless this machine lacks what the test needs (README: "Tests
# that can skip, and where").
set -euo pipefail
cd "$(dirname "$0")/.."
# Test tools built with go install (h2spec) live here.
export PATH="$PATH:$(go env GOPATH)/bin"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Files a test writes for a person to look at (the browser tests'
# screenshots), named at the end.
export ENGINE_TEST_ARTIFACTS="${ENGINE_TEST_ARTIFACTS:-$PWD/.test-artifacts}"
rm -rf "$ENGINE_TEST_ARTIFACTS"
go build -o "$tmp/testreport" ./internal/testreport
skips="$tmp/skips"
: >"$skips"

echo "== go vet (linux, and darwin and windows for the portable build)"
go vet ./...
GOOS=darwin go vet ./...
GOOS=windows go vet ./...
# tools/wtclient, the independent WebTransport client the wt tests run, is
# a module of its own (webtransport-go needs an older quic-go), which
# ./... does not reach.
go vet -C tools/wtclient ./...

echo "== tests (race detector on; fuzz targets run their seed corpus)"
# Tests named TestKernelTLS* need a kernel with kernel TLS; they run in
# the next step, where their VM timings are shown.
go test -race -count=1 -timeout 15m -skip '^TestKernelTLS' -json ./... |
	"$tmp/testreport" filter -skips "$skips"
# tools/wtclient's own tests: its parsers, and the client against
# webtransport-go's server over loopback.
go test -C tools/wtclient -race -count=1 -timeout 5m -json ./... |
	"$tmp/testreport" filter -skips "$skips"

echo "== real-kernel tests (kernel TLS: on this kernel if it has it, else in a VM)"
go test -count=1 -timeout 20m -run '^TestKernelTLS' -json ./... |
	"$tmp/testreport" filter -quiet -show 'vmtest summary|^--- ' -skips "$skips"

echo "== benchmarks, once each so they never rot (no timing is asserted)"
# Through the same filter: a benchmark that skips is recorded and judged
# like a test.
go test -count=1 -run='^$' -bench=. -benchtime=1x -json ./... |
	"$tmp/testreport" filter -quiet -skips "$skips"

if [ -d "$ENGINE_TEST_ARTIFACTS" ]; then
	echo "== for a person to look at (screenshots from the browser tests)"
	ls -1 "$ENGINE_TEST_ARTIFACTS"/* 2>/dev/null || true
fi

echo "== skipped tests"
"$tmp/testreport" skips ${ENGINE_REQUIRE_NO_SKIP:+-strict} "$skips"
