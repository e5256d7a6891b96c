#!/usr/bin/env bash
# Fetch the stock Debian kernel the real-kernel tests boot under qemu, and
# print the directory to point ENGINE_VM_KERNEL_DIR at.
#
#   scripts/fetch-vm-kernel.sh [cache-dir]     (default ~/.cache/engine-vm)
#
# The package linux-image-amd64 depends on is downloaded with apt-get
# download and unpacked with dpkg-deb: never installed. Only boot/ and the
# module folders kTLS and BBR need (net, crypto, arch/x86/crypto, lib) are
# kept; compressed modules are decompressed so finit_module takes them on
# any kernel. Needs apt-get and dpkg-deb (Debian, Ubuntu).
set -euo pipefail
cache=${1:-${ENGINE_VM_CACHE:-$HOME/.cache/engine-vm}}
mkdir -p "$cache/dl"
pkg=${KPKG:-}
if [ -z "$pkg" ]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	if [ -z "$pkg" ]; then
		apt-get update -qq >&2
		pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	fi
fi
[ -n "$pkg" ] || { echo "cannot resolve linux-image-amd64 with apt-cache" >&2; exit 1; }
kver=${pkg#linux-image-}
root="$cache/kroot/$kver"
if [ ! -f "$root/.done" ]; then
	if ! ls "$cache/dl/${pkg}"_*.deb >/dev/null 2>&1; then
		(cd "$cache/dl" && { apt-get download "$pkg" >&2 || { apt-get update -qq >&2 && apt-get download "$pkg" >&2; }; })
	fi
	deb=$(ls "$cache/dl/${pkg}"_*.deb | head -1)
	rm -rf "$root"
	mkdir -p "$root"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$root" --wildcards './boot/*' \
		'./lib/modules/*/kernel/net/*' './lib/modules/*/kernel/crypto/*' \
		'./lib/modules/*/kernel/arch/x86/crypto/*' './lib/modules/*/kernel/lib/*'
	find "$root" -name '*.ko.xz' -exec xz -d {} + 2>/dev/null || true
	find "$root" -name '*.ko.zst' -exec zstd -q -d --rm {} + 2>/dev/null || true
	find "$root" -name '*.ko.gz' -exec gzip -d {} + 2>/dev/null || true
	touch "$root/.done"
fi
echo "$root"
