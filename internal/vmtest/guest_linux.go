package vmtest

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// isGuest reports whether this binary runs as the VM's /init, or as the
// modprobe the kernel calls from there.
func isGuest() bool {
	return os.Getpid() == 1 || filepath.Base(os.Args[0]) == "modprobe"
}

// guestMain is PID 1: it mounts what tests need, loads the modules, brings
// up loopback, runs the selected tests, prints the verdict and powers off.
func guestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "modprobe" {
		os.Exit(modprobe(os.Args[1:]))
	}
	defer powerOff()
	setup()
	cmdline, _ := os.ReadFile("/proc/cmdline")
	run, watchdog := "", 600
	for _, f := range strings.Fields(string(cmdline)) {
		if v, ok := strings.CutPrefix(f, "vmtest.run="); ok {
			b, _ := hex.DecodeString(v)
			run = string(b)
		}
		if v, ok := strings.CutPrefix(f, "vmtest.watchdog="); ok {
			watchdog, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(f, "vmtest.env="); ok {
			b, _ := hex.DecodeString(v)
			for _, kv := range strings.Split(string(b), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					os.Setenv(k, v)
					fmt.Printf("vmtest: %s=%s\n", k, v)
				}
			}
		}
	}
	go func() {
		time.Sleep(time.Duration(max(watchdog, 10)) * time.Second)
		fmt.Printf("%sFAIL (watchdog after %ds)\n", markResult, watchdog)
		powerOff()
	}()
	os.Setenv("HOME", "/tmp")
	os.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
	os.Setenv("TMPDIR", "/tmp")
	os.Chdir("/tmp")
	os.Args = []string{os.Args[0], "-test.v", "-test.run=" + run, fmt.Sprintf("-test.timeout=%ds", max(watchdog-5, 5))}
	code := m.Run()
	verdict := "PASS"
	if code != 0 {
		verdict = fmt.Sprintf("FAIL (exit %d)", code)
	}
	fmt.Printf("%s%s\n", markResult, verdict)
}

func setup() {
	for _, m := range []struct{ src, dst, typ, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"tmpfs", "/tmp", "tmpfs", "size=600m"},
	} {
		if err := unix.Mount(m.src, m.dst, m.typ, 0, m.data); err != nil {
			fmt.Printf("vmtest: mount %s: %v\n", m.dst, err)
		}
	}
	var u unix.Utsname
	unix.Uname(&u)
	up, _ := os.ReadFile("/proc/uptime")
	fmt.Printf("%s kernel %s, uptime %s\n", markInit, unix.ByteSliceToString(u.Release[:]), strings.Fields(string(up) + " ?")[0])
	list, err := os.ReadFile("/modules/load.list")
	if err != nil {
		fmt.Printf("vmtest: %v\n", err)
	}
	for _, f := range strings.Fields(string(list)) {
		if err := finit("/modules/" + f); err != nil && err != unix.EEXIST {
			fmt.Printf("vmtest: load %s: %v\n", f, err)
		}
	}
	if err := loopbackUp(); err != nil {
		fmt.Printf("vmtest: lo up: %v\n", err)
	}
}

func finit(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.FinitModule(fd, "", 0)
}

// loopbackUp sets IFF_UP on lo, which starts down in a fresh kernel.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// modprobe answers the kernel's request_module ("modprobe -q -- ALIAS")
// from the initramfs: modules whose alias matches, dependencies first.
func modprobe(args []string) int {
	name := ""
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			name = a
		}
	}
	aliases, _ := os.ReadFile("/modules/modules.alias")
	depsTxt, _ := os.ReadFile("/modules/modules.dep")
	deps := map[string][]string{}
	for _, l := range strings.Split(string(depsTxt), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			deps[k] = strings.Fields(v)
		}
	}
	loaded := map[string]bool{}
	var load func(string) error
	load = func(f string) error {
		if loaded[f] {
			return nil
		}
		loaded[f] = true
		for _, d := range deps[f] {
			if err := load(d); err != nil {
				return err
			}
		}
		if err := finit("/modules/" + f); err != nil && err != unix.EEXIST {
			return err
		}
		return nil
	}
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(aliases)))
	for sc.Scan() {
		pat, file, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if m, _ := path.Match(pat, name); m || pat == name {
			found = true
			if err := load(file); err != nil {
				return 1
			}
		}
	}
	if !found {
		return 1
	}
	return 0
}

func powerOff() {
	os.Stdout.Sync()
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	os.Exit(1) // not reached; exiting PID 1 panics the kernel, and qemu -no-reboot ends
}

// hostHasKTLS reports whether this kernel takes TCP_ULP "tls" on a
// connected socket (loading the module if this process may).
func hostHasKTLS() bool {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(ln)
	if unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}) != nil || unix.Listen(ln, 1) != nil {
		return false
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		return false
	}
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(c)
	if unix.Connect(c, sa) != nil {
		return false
	}
	return unix.SetsockoptString(c, unix.IPPROTO_TCP, unix.TCP_ULP, "tls") == nil
}
