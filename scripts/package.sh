#!/usr/bin/env bash
# Builds the Debian package of this commit into dist/: a static binary
# (CGO_ENABLED=0, -trimpath, stamped with the version and commit) and
# deploy/nfpm.yaml, with nfpm at the version pinned here. Reproducible:
# SOURCE_DATE_EPOCH is the commit's time and nothing else varies, so two
# builds of one commit are byte for byte the same (TestPackage checks).
#
#   scripts/package.sh [ARCH]      # amd64 (default) or arm64
set -euo pipefail
cd "$(dirname "$0")/.."
NFPM_VERSION=v2.48.0
ARCH=${1:-amd64}
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
tree=clean
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then tree=modified; fi
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# Debian versions sort: the commit's date, then its short hash.
VERSION=${VERSION:-0.1.0~git$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d%H%M%S).${commit:0:12}}
BUILD=dist/.build
mkdir -p "$BUILD"
trap 'rm -rf "$BUILD"' EXIT
CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH go build -trimpath -buildvcs=false \
	-ldflags "-s -w -buildid= -X main.version=$VERSION -X main.commit=$commit -X main.tree=$tree" \
	-o "$BUILD/engine" ./cmd/engine
nfpm=$(go env GOPATH)/bin/nfpm
if ! "$nfpm" --version 2>/dev/null | grep -q "${NFPM_VERSION#v}"; then
	GOBIN="$(go env GOPATH)/bin" go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
fi
export VERSION ARCH SOURCE_DATE_EPOCH
out="dist/engine_${VERSION}_${ARCH}.deb"
rm -f "$out"
"$nfpm" package --config deploy/nfpm.yaml --packager deb --target "$out" >&2
echo "$out"
