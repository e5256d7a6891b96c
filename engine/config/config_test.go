package config_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mediaship/engine/engine/config"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadText(t testing.TB, dir, text string) (*config.Config, error) {
	cfg, err := config.Parse("engine.toml", dir, []byte(text))
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

func TestConfigValid(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	writeFile(t, filepath.Join(dir, "cert.pem"), "x")
	writeFile(t, filepath.Join(dir, "key.pem"), "x")
	cfg, err := loadText(t, dir, `
listen = "0.0.0.0:443"
workers = 8
root = "media"              # relative to the config file
access_log = "off"

[[sites]]
domain = "media.example.com"
root = "media"
limit_rate = "10MiB"
[sites.protocols]
h1 = true
h2 = true
h3 = false
[sites.tls]
cert = "cert.pem"
key = "key.pem"

[[sites]]
domain = "*.cdn.example.com"
index = ["index.htm", "index.html"]
protocols = { h1 = true }

[kernel]
ktls = "require"
promote_after = "1MiB"
bulk_threshold = "64KiB"
bulk_congestion = "bbr"
bbr = "auto"

[limits]
max_header_bytes = "32KiB"
max_headers = 50
header_timeout = "10s"
idle_timeout = "2m"
max_connections = 1000

[runtime.settings]
h2_tls_write_buffer_bytes = "131072"

[h3]
bulk_pace_rate = "50MiB"
max_streams = 200
allow_0rtt = false
`)
	if err != nil {
		t.Fatalf("valid config rejected:\n%v", err)
	}
	if cfg.Root != filepath.Join(dir, "media") || cfg.Sites[0].TLS.Cert != filepath.Join(dir, "cert.pem") {
		t.Errorf("relative paths not resolved against the config's directory: %q %q", cfg.Root, cfg.Sites[0].TLS.Cert)
	}
	if *cfg.Kernel.PromoteAfter != 1<<20 || cfg.Kernel.BulkThreshold != 64<<10 || cfg.Limits.MaxHeaderBytes != 32<<10 ||
		cfg.Sites[0].LimitRate != 10<<20 || cfg.Runtime.Settings.H2TLSWriteBuffer != 131072 ||
		cfg.H3.BulkPaceRate != 50<<20 || cfg.H3.MaxStreams != 200 || cfg.H3.UDPBuffer != 7<<20 {
		t.Errorf("sizes parsed wrong: %+v %+v", cfg.Kernel, cfg.Limits)
	}
	if cfg.Sites[1].Root != "" || len(cfg.Sites[1].Index) != 2 {
		t.Errorf("site 2: %+v", cfg.Sites[1])
	}

	// Defaults.
	cfg, err = loadText(t, dir, "root = \".\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":8080" || cfg.Limits.MaxHeaderBytes != 16<<10 || cfg.Kernel.BulkCongestion != "bbr" ||
		cfg.Kernel.BBR != "require" || cfg.Kernel.KTLS != "" || *cfg.Kernel.PromoteAfter != 1<<20 {
		t.Errorf("defaults: listen %q %+v", cfg.Listen, cfg.Kernel)
	}
	cfg, _ = loadText(t, dir, "root = \".\"\n[kernel]\npromote_after = \"0B\"\n")
	if *cfg.Kernel.PromoteAfter != 0 {
		t.Errorf("promote_after 0B = %v", *cfg.Kernel.PromoteAfter)
	}
}

// TestConfigErrors: every mistake names the file, the line and the key,
// and says what was expected.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, text string
		want       []string // substrings of the error, in order of lines
	}{
		{"unknown key", "root = \".\"\nlisten_addr = \":80\"\n",
			[]string{"engine.toml:2: listen_addr: unknown key; expected one of listen, workers"}},
		{"unknown nested key", "root = \".\"\n[limits]\nmax_header = 5\n",
			[]string{"engine.toml:3: limits.max_header: unknown key; expected one of max_header_bytes"}},
		{"unknown table", "root = \".\"\n[kernal]\nktls = \"off\"\n", []string{"engine.toml:2:", "kernal", "unknown key"}},
		{"wrong type", "workers = \"eight\"\nroot = \".\"\n", []string{"engine.toml:1: workers: wrong type: expected a whole number"}},
		{"wrong type bool", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.protocols]\nh2 = \"yes\"\n",
			[]string{"engine.toml:5: sites[0].protocols.h2: wrong type: expected true or false"}},
		{"bad size", "root = \".\"\n[kernel]\npromote_after = \"1 megabyte\"\n",
			[]string{"engine.toml:3: kernel.promote_after:", "is not a size", "\"64KiB\""}},
		{"bad duration", "root = \".\"\n[limits]\nidle_timeout = \"forever\"\n",
			[]string{"engine.toml:3: limits.idle_timeout:", "not a duration", "\"30s\""}},
		{"bad grace", "root = \".\"\nshutdown_grace = \"soon\"\n",
			[]string{"engine.toml:2: shutdown_grace:", "not a duration", "or \"until done\""}},
		{"bare number grace", "root = \".\"\nshutdown_grace = 30\n",
			[]string{"engine.toml:2: shutdown_grace: wrong type: expected a duration such as \"30s\", or \"until done\""}},
		{"bare number duration", "root = \".\"\n[limits]\nidle_timeout = 30\n",
			[]string{"engine.toml:3: limits.idle_timeout: 30 is too short to be meant; write a duration with a unit"}},
		{"missing root", "root = \"/does/not/exist\"\n",
			[]string{"engine.toml:1: root: cannot use \"/does/not/exist\": no such file or directory"}},
		{"root is a file", "root = \"engine.toml\"\n", []string{"engine.toml:1: root:", "is not a directory"}},
		{"nothing to serve", "workers = 2\n", []string{"nothing to serve"}},
		{"site without domain", "root = \".\"\n[[sites]]\nroot = \".\"\n", []string{"engine.toml:2: sites[0].domain: missing"}},
		{"second site missing root", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites]]\ndomain = \"b\"\nroot = \"nope\"\n",
			[]string{"engine.toml:6: sites[1].root: cannot use"}},
		{"duplicate domain", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[[sites]]\ndomain = \"A\"\n",
			[]string{"engine.toml:5: sites[1].domain:", "already the domain of sites[0]"}},
		{"bad domain", "root = \".\"\n[[sites]]\ndomain = \"a b\"\n", []string{"engine.toml:3: sites[0].domain:", "not a host name"}},
		{"cert without key", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\ncert = \"engine.toml\"\n",
			[]string{"engine.toml:4: sites[0].tls: cert and key go together"}},
		{"missing cert", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
			[]string{"engine.toml:5: sites[0].tls.cert: cannot read", "engine.toml:6: sites[0].tls.key: cannot read"}},
		{"bad min_version", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nmin_version = \"1.0\"\n",
			[]string{"engine.toml:5: sites[0].tls.min_version:", "expected \"1.3\""}},
		{"unknown key exchange", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nkey_exchanges = [\"X25519\", \"Kyber512\"]\n",
			[]string{"engine.toml:5: sites[0].tls.key_exchanges: \"Kyber512\" is not a key exchange; expected some of \"X25519MLKEM768\", \"SecP256r1MLKEM768\", \"SecP384r1MLKEM1024\", \"X25519\", \"P-256\", \"P-384\", \"P-521\""}},
		{"key exchange twice", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nkey_exchanges = [\"P-256\", \"secp256r1\"]\n",
			[]string{"engine.toml:5: sites[0].tls.key_exchanges: \"secp256r1\" is listed twice (as \"P-256\")"}},
		{"no key exchange", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nkey_exchanges = []\n",
			[]string{"engine.toml:5: sites[0].tls.key_exchanges: empty"}},
		{"hybrids only with TLS 1.2", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nmin_version = \"1.2\"\nkey_exchanges = [\"X25519MLKEM768\"]\n",
			[]string{"engine.toml:6: sites[0].tls.key_exchanges: lists only post-quantum hybrids"}},
		{"proxy key exchange", "[reverse_proxy]\nenabled = true\n[reverse_proxy.tls]\nkey_exchanges = [\"X448\"]\n[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [\"127.0.0.1:1\"]\n",
			[]string{"engine.toml:4: reverse_proxy.tls.key_exchanges: \"X448\" is not a key exchange"}},
		{"key exchanges not a list", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nkey_exchanges = \"X25519\"\n",
			[]string{"engine.toml:5: sites[0].tls.key_exchanges: wrong type: expected a list of strings"}},
		{"key exchanges nested", "listen = \":8443\"\nroot = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nkey_exchanges = [[\"X25519\"]]\n",
			[]string{"engine.toml:6: sites[0].tls.key_exchanges: wrong type: expected a list of strings"}},
		{"key exchanges a table", "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\nkey_exchanges = {a = 1}\n",
			[]string{"engine.toml:5: sites[0].tls.key_exchanges: wrong type: expected a list of strings"}},
		{"index with a number", "root = \".\"\n[[sites]]\ndomain = \"a\"\nindex = [\"i.html\", 2]\n",
			[]string{"engine.toml:4: sites[0].index: wrong type: expected a list of strings"}},
		{"bad mode", "root = \".\"\n[kernel]\nktls = \"yes\"\n", []string{"engine.toml:3: kernel.ktls: \"yes\" is not a mode; expected \"require\", \"auto\" or \"off\""}},
		{"digest without blake3", "root = \".\"\n[integrity]\ndigests = [\"sha-256\"]\n", []string{"engine.toml:3: integrity.digests:", "leaves out \"blake3\""}},
		{"unknown digest", "root = \".\"\n[integrity]\ndigests = [\"blake3\", \"md5\"]\n", []string{"engine.toml:3: integrity.digests: \"md5\" is not a digest; expected \"blake3\" or \"sha-256\""}},
		{"bad listen", "root = \".\"\nlisten = \"8080\"\n", []string{"engine.toml:2: listen:", "host:port"}},
		{"bad port", "root = \".\"\nlisten = \":99999\"\n", []string{"engine.toml:2: listen: port"}},
		{"workers range", "root = \".\"\nworkers = -1\n", []string{"engine.toml:2: workers: -1 is out of range"}},
		{"header bytes range", "root = \".\"\n[limits]\nmax_header_bytes = \"10B\"\n",
			[]string{"engine.toml:3: limits.max_header_bytes: 10B is out of range; expected 1KiB to 1MiB"}},
		{"fair share ranges", "root = \".\"\n[limits]\nmax_connections = 100\nmax_connections_per_address = 101\naddress_ipv6_prefix = 8\nmin_send_rate = \"2GiB\"\nmin_send_rate_window = \"100ms\"\n",
			[]string{"engine.toml:4: limits.max_connections_per_address: 101 is out of range; expected 1 up to max_connections (100)",
				"engine.toml:5: limits.address_ipv6_prefix: 8 is out of range",
				"engine.toml:6: limits.min_send_rate: 2GiB is out of range",
				"engine.toml:7: limits.min_send_rate_window: 100ms is out of range; expected 1s to 10m"}},
		{"memory limit too small", "root = \".\"\n[limits]\nmemory_limit = \"1MiB\"\n",
			[]string{"engine.toml:3: limits.memory_limit: 1MiB is too small to serve with; expected 32MiB or more"}},
		{"h3 pace rate too slow", "root = \".\"\n[h3]\nbulk_pace_rate = \"1KiB\"\n",
			[]string{"engine.toml:3: h3.bulk_pace_rate: 1KiB per second is too slow to be meant"}},
		{"h3 ranges", "root = \".\"\n[h3]\nmax_streams = -1\nudp_buffer_bytes = \"1KiB\"\n",
			[]string{"engine.toml:3: h3.max_streams: -1 is out of range", "engine.toml:4: h3.udp_buffer_bytes: 1KiB is out of range; expected 64KiB to 1GiB"}},
		{"h3 unknown key", "root = \".\"\n[h3]\nzero_rtt = true\n",
			[]string{"engine.toml:3: h3.zero_rtt: unknown key; expected one of"}},
		{"all protocols off", "root = \".\"\n[[sites]]\ndomain = \"a\"\nprotocols = { h1 = false, h2 = false, h3 = false }\n",
			[]string{"engine.toml:4: sites[0].protocols: every protocol is off"}},
		{"syntax", "root = \".\"\n[limits\n", []string{"engine.toml:2:"}},
		{"several at once", "root = \".\"\nworkers = 5000\n[kernel]\nbbr = \"maybe\"\n",
			[]string{"engine.toml:2: workers:", "engine.toml:4: kernel.bbr:"}},
		{"bad congestion", "root = \".\"\n[kernel]\nbulk_congestion = \"BBR!\"\n", []string{"engine.toml:3: kernel.bulk_congestion:"}},
		{"bad hidden_files", "root = \".\"\n[[sites]]\ndomain = \"a\"\nhidden_files = \"hide\"\n",
			[]string{"engine.toml:4: sites[0].hidden_files: \"hide\" is not a policy; expected \"serve\" (the default) or \"deny\""}},
		{"bad body_timeout", "root = \".\"\n[limits]\nbody_timeout = 5\n",
			[]string{"engine.toml:3: limits.body_timeout: 5 is too short to be meant"}},
		{"bad index", "root = \".\"\n[[sites]]\ndomain = \"a\"\nindex = [\"../x\"]\n", []string{"engine.toml:4: sites[0].index:"}},
		{"path prefix", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/a/../b/\"\n",
			[]string{"engine.toml:5: sites[0].paths[0].prefix: \"/a/../b/\" is not a path as the site reads it"}},
		{"path auth", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/g/\"\nauth = \"signed\"\n",
			[]string{"engine.toml:6: sites[0].paths[0].auth: \"signed\" needs a key", "[signing] keys"}},
		{"path auth choice", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/g/\"\nauth = \"digest\"\n",
			[]string{"engine.toml:6: sites[0].paths[0].auth: \"digest\" is not a choice"}},
		{"owned field", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nset_headers = { \"Content-Length\" = \"5\" }\n",
			[]string{"engine.toml:6: sites[0].paths[0].set_headers.Content-Length: Content-Length is the engine's own field"}},
		{"removed owned field", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nremove_headers = [\"ETag\"]\n",
			[]string{"engine.toml:6: sites[0].paths[0].remove_headers: ETag is the engine's own field"}},
		{"cors field", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nadd_headers = { \"Access-Control-Allow-Origin\" = \"*\" }\n",
			[]string{"engine.toml:6: sites[0].paths[0].add_headers.Access-Control-Allow-Origin: Access-Control-Allow-Origin is written by the CORS keys"}},
		{"bad address", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nallow = [\"10.0.0.0/33\"]\n",
			[]string{"engine.toml:6: sites[0].paths[0].allow: entry 0 (\"10.0.0.0/33\") is not an address or prefix"}},
		{"cors credentials with any", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\ncors_origins = [\"*\"]\ncors_credentials = true\n",
			[]string{"engine.toml:7: sites[0].paths[0].cors_credentials: browsers refuse credentials"}},
		{"bad origin", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\ncors_origins = [\"https://a.test/app\"]\n",
			[]string{"engine.toml:6: sites[0].paths[0].cors_origins: \"https://a.test/app\" is not an origin"}},
		{"missing credentials", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nauth = \"basic\"\ncredentials = \"nope\"\n",
			[]string{"engine.toml:7: sites[0].paths[0].credentials: cannot read"}},
		{"duplicate prefix", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/g/\"\n[[sites.paths]]\nprefix = \"/g/\"\n",
			[]string{"engine.toml:7: sites[0].paths[1].prefix: \"/g/\" is already the prefix of sites[0].paths[0]"}},
		{"disposition", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\ncontent_disposition = { \"*.bin\" = \"download\" }\n",
			[]string{"engine.toml:6: sites[0].paths[0].content_disposition.*.bin: \"download\" is not a disposition"}},
		{"signing key", "root = \".\"\n[signing]\nkeys = { k1 = \"missing-key\" }\n",
			[]string{"engine.toml:3: signing.keys.k1: cannot read", "head -c 32 /dev/urandom"}},
		{"forward without url", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nauth = \"forward\"\n",
			[]string{"engine.toml:6: sites[0].paths[0].auth: \"forward\" needs forward_auth"}},
		{"forward bad url", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nauth = \"forward\"\nforward_auth = { url = \"ftp://x\" }\n",
			[]string{"engine.toml:7: sites[0].paths[0].forward_auth.url: \"ftp://x\" is not an http or https URL"}},
		{"route policy key", "root = \".\"\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"127.0.0.1:9\"]\nauth = \"magic\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].auth: \"magic\" is not a choice"}},
		{"unknown path key", "[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/\"\nheaders = {}\n",
			[]string{"engine.toml:6: sites[0].paths[0].headers: unknown key; expected one of prefix, auth"}},
	}
	writeFile(t, filepath.Join(dir, "engine.toml"), "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadText(t, dir, tt.text)
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.text)
			}
			msg := err.Error()
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error does not contain %q (in order):\n%s", w, msg)
				}
				rest = rest[i+len(w):]
			}
			var ce config.Errors
			if !errors.As(err, &ce) {
				t.Errorf("error is %T, want config.Errors", err)
			}
			if strings.Contains(msg, "goroutine") || strings.Contains(msg, "panic") {
				t.Errorf("error looks like a crash: %s", msg)
			}
		})
	}
}

// TestKeyExchanges: key_exchanges is resolved in the order written,
// names as operators write them and in any case; without it a site gets
// Go's default (nil).
func TestKeyExchanges(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		list string // "" leaves the key out
		want []tls.CurveID
	}{
		{"", nil},
		{`["X25519"]`, []tls.CurveID{tls.X25519}},
		{`["x25519mlkem768", "X25519", "secp256r1", "P-384", "prime256v1"]`, nil}, // P-256 twice: an error
		{`["X25519MLKEM768", "x25519", "SECP256R1", "p-384", "secp521r1"]`, []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}},
		{`["P-256", "X25519"]`, []tls.CurveID{tls.CurveP256, tls.X25519}},
	} {
		text := "root = \".\"\n[[sites]]\ndomain = \"a\"\n[sites.tls]\n"
		if tc.list != "" {
			text += "key_exchanges = " + tc.list + "\n"
		}
		text += "[reverse_proxy]\nenabled = true\n[reverse_proxy.tls]\nkey_exchanges = [\"P-521\"]\n[[reverse_proxy.routes]]\ndomain = \"p.example\"\nupstreams = [\"127.0.0.1:1\"]\n"
		cfg, err := loadText(t, dir, text)
		if strings.Contains(tc.list, "prime256v1") {
			if err == nil {
				t.Errorf("%s: accepted P-256 twice", tc.list)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.list, err)
		}
		if got := cfg.Sites[0].TLS.Groups; !slices.Equal(got, tc.want) {
			t.Errorf("key_exchanges = %s: Groups %v, want %v", tc.list, got, tc.want)
		}
		if got := cfg.ReverseProxy.TLS.Groups; !slices.Equal(got, []tls.CurveID{tls.CurveP521}) {
			t.Errorf("[reverse_proxy.tls] key_exchanges = [\"P-521\"]: Groups %v", got)
		}
	}
	for id, want := range map[tls.CurveID]string{tls.X25519MLKEM768: "X25519MLKEM768", tls.X25519: "X25519", tls.CurveP256: "P-256", tls.CurveP521: "P-521", tls.CurveID(0x6399): "CurveID(25497)"} {
		if got := config.KeyExchangeName(id); got != want {
			t.Errorf("KeyExchangeName(%d) = %q, want %q", id, got, want)
		}
	}
}

func TestConfigFlagsOverride(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	cfg, err := config.Parse("engine.toml", dir, []byte("root = \"/does/not/exist\"\nworkers = 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.SetFlag("root", other)
	cfg.SetFlag("workers", "2")
	cfg.SetFlag("listen", "127.0.0.1:0")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("flags should override the bad root: %v", err)
	}
	if cfg.Root != other || cfg.Workers != 2 || cfg.Listen != "127.0.0.1:0" {
		t.Errorf("overrides not applied: %q %d %q", cfg.Root, cfg.Workers, cfg.Listen)
	}
	cfg, _ = config.Parse("engine.toml", dir, []byte("root = \".\"\n"))
	cfg.SetFlag("root", "/does/not/exist")
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--root: cannot use \"/does/not/exist\"") {
		t.Errorf("flag error should name the flag: %v", err)
	}
	if err := cfg.SetFlag("workers", "many"); err == nil || !strings.Contains(err.Error(), "--workers") {
		t.Errorf("SetFlag(workers, many) = %v", err)
	}
	if err := cfg.SetFlag("port", "80"); err == nil || err.Error() != "config: unknown flag port" {
		t.Errorf("SetFlag(port, 80) = %v, want config: unknown flag port", err)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want config.Size
		ok   bool
	}{
		{"1MiB", 1 << 20, true}, {"64KiB", 64 << 10, true}, {"1048576", 1 << 20, true}, {"1.5GiB", 3 << 29, true},
		{"10MB", 10e6, true}, {"4k", 4096, true}, {"2 MiB", 2 << 20, true}, {"0B", 0, true}, {"1TiB", 1 << 40, true},
		{"", 0, false}, {"MiB", 0, false}, {"1 megabyte", 0, false}, {"-1MiB", 0, false}, {"1.5B", 0, false},
		{"99999999999TiB", 0, false}, {"1..5MiB", 0, false},
	}
	for _, tt := range tests {
		got, err := config.ParseSize(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseSize(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	if s := config.Size(1 << 20).String(); s != "1MiB" {
		t.Errorf("String = %q", s)
	}
}

func FuzzConfig(f *testing.F) {
	dir := f.TempDir()
	for _, s := range []string{
		"root = \".\"\n",
		"listen = \":8080\"\nworkers = 2\nroot = \".\"\n[limits]\nmax_header_bytes = \"16KiB\"\n",
		"[[sites]]\ndomain = \"a\"\nroot = \".\"\n[sites.tls]\ncert = \"c\"\nkey = \"k\"\n[[sites]]\ndomain = \"*.b\"\n",
		"root = \".\"\n[kernel]\nktls = \"auto\"\npromote_after = \"1MiB\"\n[runtime.settings]\nh2_tls_write_buffer_bytes = \"131072\"\n",
		"root = \".\"\n[[sites]]\ndomain = \"x\"\nprotocols = { h1 = true, h2 = false }\n",
		"root = \".\"\n[[sites]]\ndomain = \"x\"\n[sites.tls]\nmin_version = \"1.2\"\nkey_exchanges = [\"X25519\", \"p-256\"]\n",
		"[[sites]]\ndomain = \"a\"\nroot = \".\"\nhsts = \"max-age=1\"\n[[sites.paths]]\nprefix = \"/g/\"\nauth = \"bearer\"\ncredentials = \"c\"\nallow = [\"10.0.0.0/8\"]\nset_headers = { \"X-A\" = \"1\" }\ncors_origins = [\"https://a.b\"]\ncontent_disposition = { \"*.bin\" = \"attachment\" }\ntypes = { \".x\" = \"a/b\" }\n[signing]\nkeys = { k = \"f\" }\n",
		"[[sites]]\ndomain = \"a\"\nroot = \".\"\n[[sites.paths]]\nprefix = \"/f/\"\nauth = \"forward\"\nforward_auth = { url = \"http://127.0.0.1:1/a\", cache = \"0s\" }\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := config.Parse("fuzz.toml", dir, []byte(text))
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			return
		}
		var ce config.Errors
		if !errors.As(err, &ce) {
			t.Fatalf("error %T %v is not config.Errors", err, err)
		}
		for _, e := range ce {
			if e.Msg == "" {
				t.Fatalf("empty message: %#v", e)
			}
			if e.File != "" && e.File != "fuzz.toml" {
				t.Fatalf("file %q", e.File)
			}
		}
		_ = fmt.Sprint(err)
	})
}

// TestREADMEConfig: the configuration block of the configuration
// reference parses with the strict decoder, so no documented key is
// misspelt or missing from Config.
func TestREADMEConfig(t *testing.T) {
	readme, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(readme), "## Configuration")
	_, block, ok := strings.Cut(rest, "```toml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no toml block under ## Configuration in docs/CONFIG.md")
	}
	if _, err := config.Parse("CONFIG.md", t.TempDir(), []byte(block)); err != nil {
		t.Errorf("README's configuration does not parse: %v", err)
	}
	for _, key := range []string{"hidden_files", "body_timeout", "header_timeout", "idle_timeout", "send_timeout", "pid_file"} {
		if !strings.Contains(block, key+" =") {
			t.Errorf("README's configuration does not show %s", key)
		}
	}
}

// TestReadSecret: a signing key is refused when others can read it, when
// it is too short to be a secret, or not a regular file.
func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(strings.Repeat("s", 32)+"\n"), 0o600)
	if b, err := config.ReadSecret(good); err != nil || len(b) != 32 {
		t.Fatalf("ReadSecret = %q, %v", b, err)
	}
	for name, tc := range map[string]struct {
		data string
		mode os.FileMode
		want string
	}{
		"world": {strings.Repeat("s", 32), 0o644, "readable by every user"},
		"short": {"  short  \n", 0o600, "holds 5 bytes; a secret needs at least 32"},
		"big":   {strings.Repeat("s", 5000), 0o600, "a secret is expected"},
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(tc.data), tc.mode)
		os.Chmod(p, tc.mode)
		if _, err := config.ReadSecret(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if _, err := config.ReadSecret(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}
