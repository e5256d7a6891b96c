// Package nginxtest runs Debian's nginx for a test: as a file server
// behind the reverse proxy, or as a PROXY protocol reader. It only starts
// and stops nginx; what nginx serves is the test's configuration.
// Invariant: the process is stopped when the test ends, and a missing
// nginx is a failure wherever ENGINE_REQUIRE_TOOLS is set (CI installs it;
// internal/testtool holds the rule).
package nginxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
)

// Start runs nginx with the http block http (a format with %[1]s for a
// private folder and %[2]s for a free 127.0.0.1:port) until the test
// ends, and returns that address once nginx accepts connections there.
func Start(t testing.TB, http string) string {
	t.Helper()
	bin := testtool.Require(t, "nginx")
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	user := ""
	if os.Geteuid() == 0 {
		// Workers would otherwise run as nobody, who cannot enter the
		// test's temporary folders (mode 0700).
		user = "user root;"
	}
	conf := fmt.Sprintf(`%[1]s
worker_processes 1;
daemon off;
master_process on;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
%[3]s
}
`, user, dir, fmt.Sprintf(http, dir, addr))
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path, "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %s", log)
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
	t.Fatalf("nginx did not listen on %s: %s", addr, log)
	return ""
}
