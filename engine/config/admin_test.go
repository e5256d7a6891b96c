package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminConfig: [admin] on loopback loads; the access log's format and
// buffer get their defaults.
func TestAdminConfig(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	for _, text := range []string{
		"root = \"media\"\n[admin]\nlisten = \"127.0.0.1:9100\"\npprof = true\n",
		"root = \"media\"\n[admin]\nlisten = \"[::1]:9100\"\n",
		"root = \"media\"\n[admin]\nlisten = \"localhost:9100\"\n",
		"root = \"media\"\n[admin]\nlisten = \"0.0.0.0:9100\"\nallow_remote = true\n",
	} {
		cfg, err := loadText(t, dir, text)
		if err != nil {
			t.Errorf("config:\n%s\nrejected: %v", text, err)
			continue
		}
		if cfg.AccessLogFormat != "combined" || cfg.AccessLogBuffer != 1<<20 {
			t.Errorf("defaults: format %q buffer %d", cfg.AccessLogFormat, cfg.AccessLogBuffer)
		}
	}
}

// TestAdminConfigErrors: each mistake names the file, line and key.
func TestAdminConfigErrors(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	root := "root = \"media\"\n"
	for _, tc := range []struct{ text, want string }{
		{root + "[admin]\nlisten = \"0.0.0.0:9100\"\n", "engine.toml:3: admin.listen: \"0.0.0.0:9100\" is reachable from other hosts"},
		{root + "[admin]\nlisten = \"192.0.2.1:9100\"\npprof = true\n", "engine.toml:3: admin.listen: \"192.0.2.1:9100\" is reachable from other hosts"},
		{root + "[admin]\nlisten = \":9100\"\n", "engine.toml:3: admin.listen: \":9100\" is reachable from other hosts"},
		{root + "[admin]\nlisten = \"metrics.local:9100\"\n", "engine.toml:3: admin.listen: host \"metrics.local\" is not an IP address"},
		{root + "[admin]\nlisten = \"9100\"\n", "engine.toml:3: admin.listen: \"9100\" is not an address"},
		{root + "[admin]\nlisten = \"127.0.0.1:http\"\n", "engine.toml:3: admin.listen: port \"http\" is not a number"},
		{"listen = \"127.0.0.1:8080\"\n" + root + "[admin]\nlisten = \"127.0.0.1:8080\"\n", "engine.toml:4: admin.listen: \"127.0.0.1:8080\" is the port of another listener"},
		{root + "[admin]\npprof = true\n", "engine.toml:2: admin.listen: missing"},
		{root + "[admin]\nlisten = \"127.0.0.1:9100\"\nmetrics = true\n", "engine.toml:4: admin.metrics"},
		{root + "access_log_format = \"apache\"\n", "engine.toml:2: access_log_format: \"apache\" is not a format"},
		{root + "access_log_buffer = \"1KiB\"\n", "engine.toml:2: access_log_buffer: 1024 bytes is out of range"},
	} {
		_, err := loadText(t, dir, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config:\n%s\ngot  %v\nwant %s", tc.text, err, tc.want)
		}
	}
}
