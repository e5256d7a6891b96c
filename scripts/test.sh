#!/usr/bin/env bash
# The whole test suite: the README's second command, and what CI runs
# (through .ci/run, after installing what the tests need).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go vet (linux, and darwin for the portable build)"
go vet ./...
GOOS=darwin go vet ./...

echo "== tests (race detector on; fuzz targets run their seed corpus)"
go test -race -count=1 -timeout 15m ./...

echo "== benchmarks, once each so they never rot (no timing is asserted)"
go test -count=1 -run='^$' -bench=. -benchtime=1x ./...
