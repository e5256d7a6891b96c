package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mediaship/engine/engine/config"
)

// TestACMEConfig: the shape loads, with defaults filled in.
func TestACMEConfig(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	writeFile(t, filepath.Join(dir, "root.pem"), "x")
	cfg, err := loadText(t, dir, `
listen = ":443"
[acme]
email = "ops@example.com"
ca = "https://acme-v02.api.letsencrypt.org/directory"
ca_root = "root.pem"
storage = "acme"
challenges = ["tls-alpn-01", "http-01"]
agree = true

[[sites]]
domain = "media.example.com"
root = "media"
[sites.tls]
acme = true

[redirect_http]
listen = ":80"
`)
	if err != nil {
		t.Fatalf("valid ACME config rejected:\n%v", err)
	}
	if !cfg.HasTLS() || !cfg.ACMEOn() || !reflect.DeepEqual(cfg.ACMENames(), []string{"media.example.com"}) {
		t.Errorf("HasTLS %v ACMEOn %v names %v", cfg.HasTLS(), cfg.ACMEOn(), cfg.ACMENames())
	}
	a := cfg.ACME
	if a.Storage != filepath.Join(dir, "acme") || a.CARoot != filepath.Join(dir, "root.pem") || a.RenewInterval.D().Minutes() != 10 || a.OCSPInterval.D().Hours() != 1 {
		t.Errorf("defaults and paths: %+v", a)
	}

	// Defaults: Let's Encrypt, /var/lib/engine/acme, tls-alpn-01 alone
	// without a redirect listener.
	cfg, err = loadText(t, dir, "[acme]\nemail = \"a@b.c\"\nagree = true\n[[sites]]\ndomain = \"m.example.com\"\nroot = \"media\"\n[sites.tls]\nacme = true\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ACME.CA != config.LetsEncrypt || cfg.ACME.Storage != "/var/lib/engine/acme" || !reflect.DeepEqual(cfg.ACME.Challenges, []string{"tls-alpn-01"}) {
		t.Errorf("defaults: %+v", cfg.ACME)
	}
}

// TestACMEConfigErrors: each mistake names the file, line and key.
func TestACMEConfigErrors(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	writeFile(t, filepath.Join(dir, "cert.pem"), "x")
	writeFile(t, filepath.Join(dir, "key.pem"), "x")
	site := "[[sites]]\ndomain = \"media.example.com\"\nroot = \"media\"\n[sites.tls]\nacme = true\n"
	for _, tc := range []struct{ text, want string }{
		{site, "engine.toml:5: acme.agree: sites[0].tls.acme = true needs the CA's terms of service accepted"},
		{site, "engine.toml:5: acme.email: sites[0].tls.acme = true needs a contact"},
		{site + "[acme]\nemail = \"ops@example.com\"\n", "engine.toml:6: acme.agree: sites[0].tls.acme = true needs the CA's terms"},
		{site + "[acme]\nagree = true\nemail = \"ops\"\n", "engine.toml:8: acme.email: \"ops\" is not an email address"},
		{"[[sites]]\ndomain = \"*.example.com\"\nroot = \"media\"\n[sites.tls]\nacme = true\n[acme]\nagree = true\nemail = \"a@b.c\"\n", "engine.toml:5: sites[0].tls.acme: \"*.example.com\" is a wildcard"},
		{site + "cert = \"cert.pem\"\nkey = \"key.pem\"\n[acme]\nagree = true\nemail = \"a@b.c\"\n", "engine.toml:5: sites[0].tls.acme: acme = true and cert/key both"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\nchallenges = [\"http-01\"]\n", "engine.toml:9: acme.challenges: http-01 is answered on the plain listener of [redirect_http], which is not configured"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\nchallenges = [\"dns-01\"]\n", "engine.toml:9: acme.challenges: entry 0: dns-01 is not answered by the engine"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\nchallenges = []\n", "engine.toml:9: acme.challenges: empty"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\nca = \"http://ca.example/dir\"\n", "engine.toml:9: acme.ca: \"http://ca.example/dir\" is not an https:// URL"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\nca_root = \"nope.pem\"\n", "engine.toml:9: acme.ca_root: cannot read"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\nrenew_interval = \"1ms\"\n", "engine.toml:9: acme.renew_interval: 1ms is too short"},
		{"root = \"media\"\n[redirect_http]\nlisten = \":80\"\n", "engine.toml:2: redirect_http: redirects to https://, and the engine serves no TLS"},
		{site + "[acme]\nagree = true\nemail = \"a@b.c\"\n[redirect_http]\nhttps_port = 8443\n", "engine.toml:9: redirect_http.listen: missing"},
		{"listen = \":8443\"\n" + site + "[acme]\nagree = true\nemail = \"a@b.c\"\n[redirect_http]\nlisten = \"127.0.0.1:8443\"\n", "engine.toml:11: redirect_http.listen: \"127.0.0.1:8443\" is the port of listen"},
		{"[reverse_proxy]\nenabled = true\n[reverse_proxy.tls]\nacme = true\n[[reverse_proxy.routes]]\ndomain = \"*.example.com\"\nupstreams = [\"127.0.0.1:1\"]\n[acme]\nagree = true\nemail = \"a@b.c\"\n", "engine.toml:6: reverse_proxy.routes[0].domain: \"*.example.com\" is a wildcard"},
	} {
		_, err := loadText(t, dir, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config:\n%s\ngot  %v\nwant %s", tc.text, err, tc.want)
		}
	}
}

// TestACMEProxyNames: with [reverse_proxy.tls] acme, every named
// terminating route domain gets a certificate; a site's own wins.
func TestACMEProxyNames(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	cfg, err := loadText(t, dir, `
[[sites]]
domain = "files.example.com"
root = "media"
[sites.tls]
acme = true
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
acme = true
[[reverse_proxy.routes]]
domain = "api.example.com"
upstreams = ["127.0.0.1:9000"]
[[reverse_proxy.routes]]
domain = "Files.Example.com."
path_prefix = "/api/"
upstreams = ["127.0.0.1:9000"]
[[reverse_proxy.routes]]
domain = "relay.example.com"
tls_termination = false
upstreams = ["127.0.0.1:9443"]
[acme]
agree = true
email = "a@b.c"
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ACMENames(); !reflect.DeepEqual(got, []string{"files.example.com", "api.example.com"}) {
		t.Errorf("ACMENames = %v", got)
	}
}
