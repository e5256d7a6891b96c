package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/config"
)

// TestWebTransportConfig: the issue's [webtransport] table loads (off),
// with its defaults.
func TestWebTransportConfig(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	cfg, err := loadText(t, dir, `root = "media"
[webtransport]
enabled = false
path = "/.well-known/engine/diagnostics"
allowed_origins = ["https://media.example.com", "http://localhost:8080", "*"]
max_sessions = 64
max_streams_per_session = 16
max_datagram_bytes = 1200
max_bytes_per_session = "10GiB"
idle_timeout = "30s"
`)
	if err != nil {
		t.Fatalf("rejected: %v", err)
	}
	cfg, err = loadText(t, dir, "root = \"media\"\n")
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.WebTransport
	if w.Enabled || w.Path != config.DefaultWebTransportPath || w.MaxSessions != 64 || w.MaxStreamsPerSession != 16 ||
		w.MaxDatagramBytes != 1200 || w.MaxBytesPerSession != 10<<30 || w.IdleTimeout.D() != 30*time.Second {
		t.Errorf("defaults: %+v", w)
	}
}

// TestWebTransportConfigErrors: each mistake names the file, line and key;
// enabled = true is refused until sessions are served, rather than
// accepted and ignored.
func TestWebTransportConfigErrors(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	root := "root = \"media\"\n[webtransport]\n"
	for _, tc := range []struct{ text, want string }{
		{root + "path = \"diag\"\n", "engine.toml:3: webtransport.path: \"diag\" is not a path"},
		{root + "path = \"/d?x=1\"\n", "engine.toml:3: webtransport.path"},
		{root + "allowed_origins = [\"media.example.com\"]\n", "engine.toml:3: webtransport.allowed_origins: entry 0: \"media.example.com\" is not an origin"},
		{root + "allowed_origins = [\"https://a.example/x\"]\n", "entry 0: \"https://a.example/x\" is not an origin"},
		{root + "max_sessions = -1\n", "engine.toml:3: webtransport.max_sessions: -1 is out of range"},
		{root + "max_streams_per_session = 5000\n", "webtransport.max_streams_per_session: 5000 is out of range"},
		{root + "max_datagram_bytes = 1500\n", "webtransport.max_datagram_bytes: 1500 is out of range; expected 16 to 1200"},
		{root + "max_bytes_per_session = \"1KiB\"\n", "webtransport.max_bytes_per_session: 1024 bytes is out of range"},
		{root + "idle_timeout = \"1h\"\n", "webtransport.idle_timeout: 1h0m0s is out of range"},
		{root + "enabled = true\n", "engine.toml:3: webtransport.enabled: WebTransport runs over HTTP/3"},
		{root + "nope = 1\n", "webtransport.nope"},
	} {
		_, err := loadText(t, dir, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config:\n%s\ngot  %v\nwant %s", tc.text, err, tc.want)
		}
	}
	// With a TLS site HTTP/3 is on, and so may WebTransport be.
	writeFile(t, filepath.Join(dir, "c.pem"), "x")
	writeFile(t, filepath.Join(dir, "k.pem"), "x")
	c, err := loadText(t, dir, "[[sites]]\ndomain = \"a.example\"\nroot = \"media\"\n[sites.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n[webtransport]\nenabled = true\n")
	if err != nil || !c.WebTransport.Enabled {
		t.Errorf("enabled with HTTP/3: %v", err)
	}
}
