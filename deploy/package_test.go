package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mediaship/engine/internal/testtool"
)

// TestPackage builds the Debian package twice from the working tree and
// checks that the two are the same bytes (reproducible), that it holds
// the binary, the unit, the configuration files and the directories owned
// by the engine user, that its binary names its version, and that
// systemd-analyze verify passes on the unit. .ci/run installs it with
// dpkg -i and runs serve --check with its default configuration.
func TestPackage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the package is for Linux")
	}
	dpkg := testtool.Require(t, "dpkg-deb")
	analyze := testtool.Require(t, "systemd-analyze")
	var sums []string
	var deb string
	for range 2 {
		out, err := exec.Command("../scripts/package.sh").Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("scripts/package.sh: %v\n%s", err, stderr)
		}
		deb = filepath.Join("..", strings.TrimSpace(string(out)))
		f, err := os.Open(deb)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, f)
		f.Close()
		sums = append(sums, hex.EncodeToString(h.Sum(nil)))
	}
	defer os.Remove(deb)
	if sums[0] != sums[1] {
		t.Errorf("two builds of one tree differ: %s and %s", sums[0], sums[1])
	}
	list, err := exec.Command(dpkg, "-c", deb).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-rwxr-xr-x root/root", "./usr/bin/engine",
		"./lib/systemd/system/engine.service", "./etc/engine/engine.toml", "./etc/logrotate.d/engine",
		"./usr/lib/modules-load.d/engine.conf",
		"drwxr-x--- engine/engine", "./var/lib/engine/", "./var/log/engine/", "./var/cache/engine/",
	} {
		if !strings.Contains(string(list), want) {
			t.Errorf("the package lacks %q:\n%s", want, list)
		}
	}
	info, err := exec.Command(dpkg, "-f", deb, "Package", "Version", "Depends").Output()
	if err != nil || !strings.Contains(string(info), "Package: engine") || !strings.Contains(string(info), "Depends: adduser") {
		t.Errorf("control fields: %s %v", info, err)
	}
	conf, _ := exec.Command(dpkg, "-I", deb, "conffiles").Output()
	if !strings.Contains(string(conf), "/etc/engine/engine.toml") {
		t.Errorf("engine.toml is not a conffile: %q", conf)
	}

	// The binary inside, and the unit pointed at it.
	dir := t.TempDir()
	if out, err := exec.Command(dpkg, "-x", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "usr/bin/engine")
	v, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(v), "CGO_ENABLED=0") || !strings.Contains(string(v), "commit ") {
		t.Errorf("engine version: %s %v", v, err)
	}
	unit, err := os.ReadFile(filepath.Join(dir, "lib/systemd/system/engine.service"))
	if err != nil {
		t.Fatal(err)
	}
	u := filepath.Join(t.TempDir(), "engine.service")
	os.WriteFile(u, []byte(strings.ReplaceAll(string(unit), "/usr/bin/engine", bin)), 0o644)
	if out, err := exec.Command(analyze, "verify", u).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
