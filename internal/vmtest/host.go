package vmtest

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// kernelDir finds the extracted kernel: ENGINE_VM_KERNEL_DIR, or the
// newest one scripts/fetch-vm-kernel.sh left in its default cache.
func kernelDir() (root, vmlinuz, modDir string, err error) {
	root = os.Getenv("ENGINE_VM_KERNEL_DIR")
	if root == "" {
		cache := os.Getenv("ENGINE_VM_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "engine-vm")
		}
		dirs, _ := filepath.Glob(filepath.Join(cache, "kroot", "*"))
		sort.Strings(dirs)
		for i := len(dirs) - 1; i >= 0; i-- {
			if _, err := os.Stat(filepath.Join(dirs[i], ".done")); err == nil {
				root = dirs[i]
				break
			}
		}
	}
	if root == "" {
		return "", "", "", errors.New("no kernel: run scripts/fetch-vm-kernel.sh (needs apt-get) or set ENGINE_VM_KERNEL_DIR")
	}
	kz, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	md, _ := filepath.Glob(filepath.Join(root, "lib", "modules", "*"))
	if len(kz) == 0 || len(md) == 0 {
		return "", "", "", fmt.Errorf("%s holds no boot/vmlinuz-* and lib/modules/*: run scripts/fetch-vm-kernel.sh", root)
	}
	return root, kz[0], md[0], nil
}

// unavailable skips, or fails when the VM is required (CI).
func unavailable(t *testing.T, why string) {
	t.Helper()
	msg := "real-kernel VM test not run: " + why +
		" (install: apt-get install --no-install-recommends qemu-system-x86; scripts/fetch-vm-kernel.sh)"
	if os.Getenv("ENGINE_REQUIRE_VM") != "" {
		t.Fatal(msg + "; ENGINE_REQUIRE_VM is set, so this is a failure")
	}
	t.Skip(msg)
}

// guestBinary builds this package's tests once per process: static, with
// no race detector, ready to be /init.
var guestBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "vmtest-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "init")
	cmd := exec.Command("go", "test", "-c", "-o", out, "-trimpath", "-ldflags=-s -w", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c: %v\n%s", err, b)
	}
	return out, nil
})

// kvmUsable reports whether /dev/kvm can run a stock kernel. On these
// machines /dev/kvm is served by kvm_pvm, under which a stock kernel
// hangs; only kvm_intel or kvm_amd is trusted.
func kvmUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	_, intel := os.Stat("/sys/module/kvm_intel")
	_, amd := os.Stat("/sys/module/kvm_amd")
	return intel == nil || amd == nil
}

// Run boots the VM with this package's tests selected by o.Run, streams
// the console into the test log, and fails t unless the tests passed:
// the guest's binary exited 0, at least one test ran, every test that
// started printed "--- PASS" (a skip is a failure), and when o.Run names
// one test exactly (RunPattern), that test ran.
func Run(t *testing.T, o Options) *Result {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		unavailable(t, "needs a linux/amd64 host")
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		unavailable(t, "qemu-system-x86_64 not found")
	}
	_, vmlinuz, modDir, err := kernelDir()
	if err != nil {
		unavailable(t, err.Error())
	}
	if o.Modules == nil {
		o.Modules = DefaultModules
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	bin, err := guestBinary()
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	init, err := os.ReadFile(bin)
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	byName, err := indexModules(modDir)
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	mods, err := loadOrder(byName, o.Modules, o.Omit)
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	extra, err := binaryFiles(o.Binaries)
	if err != nil {
		unavailable(t, "cannot copy "+strings.Join(o.Binaries, ", ")+" into the VM: "+err.Error())
	}
	initrd := filepath.Join(t.TempDir(), "initramfs.cpio.gz")
	if err := writeInitramfs(initrd, init, mods, extra...); err != nil {
		t.Fatalf("vmtest: %v", err)
	}

	appendLine := []string{"console=ttyS0", "quiet", "panic=-1",
		"vmtest.run=" + hex.EncodeToString([]byte(o.Run)),
		fmt.Sprintf("vmtest.watchdog=%d", int(o.Timeout.Seconds())-15)}
	for k, v := range o.Params {
		appendLine = append(appendLine, "vmtest.p."+k+"="+hex.EncodeToString([]byte(v)))
	}
	if env := requireEnv(os.Environ()); len(env) > 0 {
		appendLine = append(appendLine, "vmtest.env="+hex.EncodeToString([]byte(strings.Join(env, "\x00"))))
	}
	accels := []string{"tcg"}
	if kvmUsable() {
		accels = []string{"kvm", "tcg"}
	}
	var res *Result
	for i, accel := range accels {
		probe := time.Duration(0)
		if i < len(accels)-1 {
			probe = 30 * time.Second // KVM that cannot boot this kernel hangs quietly
		}
		res, err = boot(qemu, accel, vmlinuz, initrd, strings.Join(appendLine, " "), o.Timeout, probe)
		if err != errNoInit {
			break
		}
		t.Logf("vmtest: %s did not reach /init within %v; trying %s", accel, probe, accels[i+1])
	}
	if res != nil {
		t.Logf("vmtest: %s, boot %v, boot to result %v; console:\n%s", res.Accel, res.Boot.Round(time.Millisecond),
			res.Total.Round(time.Millisecond), res.Output)
	}
	// The guest's verdict is its exit code, 0 when tests skip too: also
	// read what the tests printed.
	var problems []string
	if res != nil {
		problems = parseTestV(res.Output).problems(o.Run, literalName(o.Run))
	}
	switch {
	case err != nil && len(problems) > 0:
		t.Fatalf("vmtest: %v:\n\t%s", err, strings.Join(problems, "\n\t"))
	case err != nil:
		t.Fatalf("vmtest: %v", err)
	case len(problems) > 0:
		t.Fatalf("vmtest: the tests in the VM exited 0, but:\n\t%s", strings.Join(problems, "\n\t"))
	}
	return res
}

// requireEnv picks the ENGINE_REQUIRE_* settings out of env, sorted, for
// the guest: a test that would fail on the host for a missing tool or
// feature must fail in the VM too, not skip.
func requireEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "ENGINE_REQUIRE_") && strings.Contains(kv, "=") {
			out = append(out, kv)
		}
	}
	sort.Strings(out)
	return out
}

// errNoInit and the other errors of boot and its helpers are bare: Run
// reports them with a "vmtest: " prefix.
var errNoInit = errors.New("/init did not start")

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z]|\x1bc`)

func boot(qemu, accel, vmlinuz, initrd, cmdline string, timeout, initProbe time.Duration) (*Result, error) {
	args := []string{"-m", "1024M", "-smp", "2", "-nographic", "-no-reboot", "-nodefaults",
		"-serial", "stdio", "-display", "none", "-kernel", vmlinuz, "-initrd", initrd, "-append", cmdline}
	if accel == "kvm" {
		args = append([]string{"-accel", "kvm", "-cpu", "host"}, args...)
	} else {
		args = append([]string{"-accel", "tcg,thread=multi", "-cpu", "max"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	cmd.Stdin = nil
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	res := &Result{Accel: accel}
	var out strings.Builder
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(lines)
	}()
	exited := make(chan error, 1)
	go func() { err := cmd.Wait(); pw.Close(); exited <- err }()

	var probe <-chan time.Time
	if initProbe > 0 {
		probe = time.After(initProbe)
	}
	verdict := ""
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			l = ansi.ReplaceAllString(l, "") // SeaBIOS clears the screen
			out.WriteString(l + "\n")
			if strings.Contains(l, markInit) && res.Boot == 0 {
				res.Boot = time.Since(start)
				probe = nil
			}
			if v, ok := strings.CutPrefix(l, markResult); ok {
				verdict = v
				res.Total = time.Since(start)
			}
		case <-probe:
			cancel()
			<-exited
			res.Output = out.String()
			return res, errNoInit
		}
	}
	werr := <-exited
	res.Output = out.String()
	switch {
	case verdict == "PASS":
		return res, nil
	case verdict != "":
		return res, fmt.Errorf("tests failed in the VM (%s)", verdict)
	case ctx.Err() != nil:
		return res, fmt.Errorf("VM still running after %v; killed", timeout)
	}
	return res, fmt.Errorf("the VM ended without a verdict (qemu: %v)", werr)
}
