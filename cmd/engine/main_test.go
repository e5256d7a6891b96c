package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("root = \".\"\nlisten = \"127.0.0.1:0\"\n"), 0o644)
	nocc := filepath.Join(dir, "nocc.toml")
	os.WriteFile(nocc, []byte("root = \".\"\nlisten = \"127.0.0.1:0\"\n[kernel]\nbulk_congestion = \"nosuch_cc\"\nbbr = \"require\"\n"), 0o644)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("root = \".\"\n[limits]\nidle_timeout = \"soon\"\n"), 0o644)

	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"serve", "--check", "-c", good}, 0, "configuration " + good + " is valid", ""},
		{[]string{"serve", "--check", "--config", good}, 0, "is valid", ""},
		{[]string{"serve", "--check", "-c", bad}, 1, "", bad + ":3: limits.idle_timeout: \"soon\" is not a duration"},
		{[]string{"serve", "--check", "-c", filepath.Join(dir, "missing.toml")}, 1, "", "missing.toml: cannot read: no such file or directory"},
		{[]string{"serve", "--check", "-c", good, "--root", "/does/not/exist"}, 1, "", "--root: cannot use \"/does/not/exist\""},
		{[]string{"serve", "--check", "--root", dir}, 0, "configuration flags is valid", ""},
		{[]string{"serve", "--check"}, 1, "", "nothing to serve"},
		{[]string{"serve", "--check", "--root", dir, "--workers", "x"}, 1, "", "--workers: \"x\" is not a whole number"},
		{[]string{"serve", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"serve", "extra"}, 2, "", "unexpected argument"},
		{[]string{"version"}, 0, "engine ", ""},
		{[]string{"help"}, 0, "engine serve [-c engine.toml]", ""},
		{[]string{"frobnicate"}, 2, "", "unknown command \"frobnicate\""},
		{[]string{"preflight", "-c", bad}, 2, "", "not a duration"},
		{[]string{"preflight", "-c", nocc}, 1, "TCP congestion control nosuch_cc  FAIL", ""},
		{[]string{"preflight", "-c", nocc, "--json"}, 1, `"id": "tcp.congestion"`, ""},
		{[]string{"preflight", "--bogus"}, 2, "", "flag provided but not defined"},
		{[]string{"serve", "-c", nocc}, 1, "", "refusing to start"},
		{nil, 2, "", "Usage:"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := run(tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errb.String(), tt.stderr) {
			t.Errorf("engine %v = %d\nstdout: %s\nstderr: %s\nwant %d, stdout ~ %q, stderr ~ %q",
				tt.args, code, out.String(), errb.String(), tt.code, tt.stdout, tt.stderr)
		}
	}
}

// TestServeBinary runs the README's first command as a real process:
// serve a directory, answer a request, stop cleanly on SIGTERM.
func TestServeBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello\n"), 0o644)
	cmd := exec.Command(bin, "serve", "--root", root, "--listen", "127.0.0.1:0", "--workers", "2")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addrRe := regexp.MustCompile(`msg=serving addr=(\S+)`)
	lines := bufio.NewScanner(stderr)
	addr := ""
	for lines.Scan() {
		if m := addrRe.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		t.Fatal("no 'serving' log line")
	}
	go io.Copy(io.Discard, stderr)
	resp, err := http.Get("http://" + addr + "/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello\n" {
		t.Errorf("body %q", body)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop on SIGTERM")
	}
}
