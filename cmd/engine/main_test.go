package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
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

	"github.com/mediaship/engine/internal/selfsigned"
)

// TestMain gives the servers these tests start a state directory of
// this run's ([integrity] state_dir defaults below $STATE_DIRECTORY),
// never /var/lib/engine.
func TestMain(m *testing.M) {
	state, err := os.MkdirTemp("", "engine-cmd-test-state-*")
	if err == nil {
		os.Setenv("STATE_DIRECTORY", state)
	}
	code := m.Run()
	if state != "" {
		os.RemoveAll(state)
	}
	os.Exit(code)
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("root = \".\"\nlisten = \"127.0.0.1:0\"\n"), 0o644)
	nocc := filepath.Join(dir, "nocc.toml")
	os.WriteFile(nocc, []byte("root = \".\"\nlisten = \"127.0.0.1:0\"\n[kernel]\nbulk_congestion = \"nosuch_cc\"\nbbr = \"require\"\n"), 0o644)
	unresolved := filepath.Join(dir, "unresolved.toml") // names resolve as at the start (".invalid" never does)
	os.WriteFile(unresolved, []byte("root = \".\"\nlisten = \"127.0.0.1:0\"\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"nosuch.invalid:80\"]\n"), 0o644)
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
		{[]string{"serve", "--check", "-c", unresolved}, 1, "", unresolved + ":7: reverse_proxy.routes[0].upstreams: \"nosuch.invalid:80\": cannot resolve"},
		{[]string{"serve", "--check", "-c", bad}, 1, "", bad + ":3: limits.idle_timeout: \"soon\" is not a duration"},
		{[]string{"serve", "--check", "-c", filepath.Join(dir, "missing.toml")}, 1, "", "missing.toml: cannot read: no such file or directory"},
		{[]string{"serve", "--check", "-c", good, "--root", "/does/not/exist"}, 1, "", "--root: cannot use \"/does/not/exist\""},
		{[]string{"serve", "--check", "--root", dir}, 0, "configuration flags is valid, and this machine has the kernel features it requires", ""},
		{[]string{"serve", "--check", "--root", dir, "--self-signed"}, 0, "--self-signed relaxed this: kernel.ktls is \"auto\"", ""},
		{[]string{"serve", "--check", "-c", nocc}, 1, "", "is valid, but serve would refuse to start with it"},
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

// TestCheckACME: serve --check refuses tls.acme without the CA's terms
// agreed to and an email, naming the keys.
func TestCheckACME(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	cfg := filepath.Join(dir, "acme.toml")
	os.WriteFile(cfg, []byte("[[sites]]\ndomain = \"media.example.com\"\nroot = \"media\"\n[sites.tls]\nacme = true\n"), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--check", "-c", cfg}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), cfg+":5: acme.agree:") || !strings.Contains(errb.String(), cfg+":5: acme.email:") {
		t.Errorf("serve --check = %d\nstderr: %s", code, errb.String())
	}
	os.WriteFile(cfg, []byte("[[sites]]\ndomain = \"media.example.com\"\nroot = \"media\"\n[sites.tls]\nacme = true\n[acme]\nagree = true\nemail = \"ops@example.com\"\nstorage = \"acme\"\n"+
		"[kernel]\nktls = \"auto\"\n"), 0o644) // --check probes the kernel: kernel TLS is required by default with a certificate
	out.Reset()
	errb.Reset()
	if code := run([]string{"serve", "--check", "-c", cfg}, &out, &errb); code != 0 {
		t.Errorf("serve --check of a complete ACME config = %d\nstderr: %s", code, errb.String())
	}
	// preflight -c lists the name, with no certificate in storage yet; a
	// missing certificate does not fail preflight (serve gets it).
	out.Reset()
	errb.Reset()
	run([]string{"preflight", "-c", cfg}, &out, &errb)
	if !regexp.MustCompile(`media\.example\.com\s+NONE\s+no certificate: storage `).MatchString(out.String()) {
		t.Errorf("preflight -c: no ACME line for the name:\n%s\n%s", out.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "acme")); err == nil {
		t.Error("preflight created the storage directory; it must only read")
	}
	out.Reset()
	run([]string{"preflight", "-c", cfg, "--json"}, &out, &errb)
	if !strings.Contains(out.String(), `"acme": [`) || !strings.Contains(out.String(), `"name": "media.example.com"`) {
		t.Errorf("preflight -c --json: no ACME part:\n%s", out.String())
	}
}

// TestReloadBinary: SIGHUP reads the config file again; a broken one is
// refused with a log line naming its line and key, and the server goes on
// with the old; a new certificate is applied, and so is any other change
// (a limit here).
func TestReloadBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	for _, n := range []string{"one", "two"} {
		c, err := selfsigned.New(n, time.Hour, "media.example.com")
		if err != nil {
			t.Fatal(err)
		}
		cp, kp, _ := selfsigned.PEM(c)
		os.WriteFile(filepath.Join(dir, n+".pem"), cp, 0o644)
		os.WriteFile(filepath.Join(dir, n+"-key.pem"), kp, 0o600)
	}
	conf := func(cert, extra string) {
		os.WriteFile(filepath.Join(dir, "engine.toml"), []byte(fmt.Sprintf("listen = \"127.0.0.1:0\"\nworkers = 1\n%s[kernel]\nktls = \"auto\"\n[[sites]]\ndomain = \"media.example.com\"\nroot = \"media\"\n[sites.tls]\ncert = \"%s.pem\"\nkey = \"%s-key.pem\"\n", extra, cert, cert)), 0o644)
	}
	conf("one", "")
	cmd := exec.Command(bin, "serve", "-c", filepath.Join(dir, "engine.toml"))
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	await := func(re string) string {
		t.Helper()
		r := regexp.MustCompile(re)
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("engine exited before logging %q", re)
				}
				if m := r.FindStringSubmatch(l); m != nil {
					return m[len(m)-1]
				}
			case <-timeout:
				t.Fatalf("no log line %q", re)
			}
		}
	}
	addr := await(`msg=serving addr=(\S+)`)
	subject := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "media.example.com", InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if s := subject(); s != "one" {
		t.Fatalf("certificate %q, want one", s)
	}
	conf("two", "[limits]\nidle_timeout = \"soon\"\n")
	cmd.Process.Signal(syscall.SIGHUP)
	await(`SIGHUP: configuration not reloaded.*engine.toml:4: limits.idle_timeout`)
	if s := subject(); s != "one" {
		t.Errorf("a refused reload changed the certificate to %q", s)
	}
	conf("two", "[limits]\nidle_timeout = \"10s\"\n")
	cmd.Process.Signal(syscall.SIGHUP)
	await(`configuration reloaded: new connections get it`)
	if s := subject(); s != "two" {
		t.Errorf("after the reload the certificate is %q, want two", s)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}
