// Package vmtest runs a package's tests on a real kernel that has what
// the development machines' kernel lacks (kernel TLS): Debian's stock
// kernel booted under qemu, with a tiny initramfs whose /init is the
// package's own test binary, built static.
//
// A package opts in with TestMain:
//
//	func TestMain(m *testing.M) { vmtest.Main(m) }
//
// and a test that needs the kernel calls Run, which boots the VM and runs
// the named tests inside it; inside the VM the same test sees InVM() and
// does the real work. The host needs qemu-system-x86_64 and an extracted
// kernel (scripts/fetch-vm-kernel.sh; ENGINE_VM_KERNEL_DIR points at it).
// Without them Run skips, naming what to install, unless
// ENGINE_REQUIRE_VM is set (CI sets it): then it fails.
//
// The guest runs with the host's ENGINE_REQUIRE_* settings, and a test
// that skips there fails on the host: the VM exists to run it. So does a
// test asked for that did not run (its -run pattern matched nothing).
//
// Invariant: the guest always powers off. A watchdog ends it when the
// tests hang, and the host kills qemu past the timeout.
package vmtest
