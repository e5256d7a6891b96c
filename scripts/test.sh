#!/usr/bin/env bash
# The whole test suite: the README's second command, and what CI runs
# (through .ci/run, after installing what the tests need).
set -euo pipefail
cd "$(dirname "$0")/.."
# Test tools built with go install (h2spec) live here.
export PATH="$PATH:$(go env GOPATH)/bin"

echo "== go vet (linux, and darwin for the portable build)"
go vet ./...
GOOS=darwin go vet ./...

echo "== tests (race detector on; fuzz targets run their seed corpus)"
# Tests named TestKernelTLS* need a kernel with kernel TLS; they run in
# the next step, where their VM timings are shown.
go test -race -count=1 -timeout 15m -skip '^TestKernelTLS' ./...

echo "== real-kernel tests (kernel TLS: on this kernel if it has it, else in a VM)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if ! go test -count=1 -timeout 20m -v -run '^TestKernelTLS' ./... >"$out" 2>&1; then
	cat "$out"
	exit 1
fi
grep -E '^(ok|---|FAIL)|vmtest summary|SKIP' "$out" | grep -v 'no test files' || true

echo "== benchmarks, once each so they never rot (no timing is asserted)"
go test -count=1 -run='^$' -bench=. -benchtime=1x ./...
