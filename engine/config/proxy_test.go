package config_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaship/engine/engine/config"
)

// TestProxyConfig: the [reverse_proxy] shape operators write, with its
// defaults filled in.
func TestProxyConfig(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "media"), 0o755)
	for _, f := range []string{"proxy-cert.pem", "proxy-key.pem", "ca.pem"} {
		writeFile(t, filepath.Join(dir, f), "x")
	}
	cfg, err := loadText(t, dir, `
listen = "0.0.0.0:443"
[reverse_proxy]
enabled = true
tls_termination = true
trusted_proxies = ["10.0.0.1", "192.168.0.0/16"]

[reverse_proxy.protocols]
h1 = true
h2 = true
h3 = true

[reverse_proxy.tls]
cert = "proxy-cert.pem"
key = "proxy-key.pem"

[[reverse_proxy.routes]]
domain = "media.example.com"
path_prefix = "/"
upstreams = ["10.0.0.20:8080", "10.0.0.21:8080"]
lb = "round_robin"
connect_timeout = "5s"
response_timeout = "60s"
read_timeout = "60s"
max_body = "0"
max_idle = 256
idle_timeout = "50s"
upstream_tls = false

[[reverse_proxy.routes]]
domain = "media.example.com"
path_prefix = "/api/"
upstreams = ["backend.internal:8443"]
lb = "least_conn"
max_body = "10MiB"
max_idle = 0

[runtime.settings]
proxy_h2_tls_max_send_buffer_bytes = "131072"
proxy_h2_tls_connection_send_buffer_bytes = "33554432"
`)
	if err != nil {
		t.Fatalf("valid proxy config rejected (no root or site needed when routes serve):\n%v", err)
	}
	rp := cfg.ReverseProxy
	if !cfg.ProxyOn() || !cfg.HasTLS() || len(rp.Routes) != 2 || len(rp.Trusted) != 2 || rp.Trusted[0].Bits() != 32 {
		t.Fatalf("parsed wrong: %+v", rp)
	}
	r0, r1 := rp.Routes[0], rp.Routes[1]
	if r0.ConnectTimeout.D().Seconds() != 5 || *r0.MaxIdle != 256 || r0.MaxBody != 0 || r0.IdleTimeout.D().Seconds() != 50 {
		t.Errorf("route 0: %+v", r0)
	}
	if *r1.MaxIdle != 0 || r1.MaxBody != 10<<20 || r1.LB != "least_conn" ||
		r1.ResponseTimeout.D().Seconds() != 60 || r1.ReadTimeout.D().Seconds() != 60 {
		t.Errorf("route 1 (defaults): %+v", r1)
	}
	if cfg.Runtime.Settings.ProxyH2TLSConnectionSendBuffer != 32<<20 || cfg.Runtime.Settings.ProxyH2TLSMaxSendBuffer != 128<<10 {
		t.Errorf("runtime settings: %+v", cfg.Runtime.Settings)
	}

	// Off: the section is read for mistakes of syntax and type, not used.
	cfg, err = loadText(t, dir, "root = \".\"\n[reverse_proxy]\nenabled = false\n")
	if err != nil || cfg.ProxyOn() {
		t.Errorf("disabled proxy: %v, on %v", err, cfg.ProxyOn())
	}
}

// TestPassthroughConfig: the shape (every route relayed, no
// certificate at all) and a listener mixing modes: one domain relayed,
// the rest terminated with the sites' certificate.
func TestPassthroughConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "c.pem"), "x")
	cfg, err := loadText(t, dir, `
[reverse_proxy]
enabled = true
tls_termination = false

[[reverse_proxy.routes]]
domain = "media.example.com"
upstreams = ["10.0.0.20:443"]
proxy_protocol = "off"

[[reverse_proxy.routes]]
domain = "*.example.org"
upstreams = ["10.0.0.21:443"]
proxy_protocol = "v2"
connect_timeout = "2s"
`)
	if err != nil {
		t.Fatalf("passthrough config rejected:\n%v", err)
	}
	r0, r1 := cfg.ReverseProxy.Routes[0], cfg.ReverseProxy.Routes[1]
	if !cfg.Passthrough() || cfg.Terminating() || cfg.HasTLS() || !r0.Passthrough || !r1.Passthrough {
		t.Fatalf("modes wrong: passthrough %v terminating %v routes %v %v", cfg.Passthrough(), cfg.Terminating(), r0.Passthrough, r1.Passthrough)
	}
	if r0.ProxyProtocol != "off" || r1.ProxyProtocol != "v2" || r0.IdleTimeout.D().Minutes() != 10 || r1.ConnectTimeout.D().Seconds() != 2 {
		t.Errorf("routes: %+v\n%+v", r0, r1)
	}

	cfg, err = loadText(t, dir, `
root = "."
[[sites]]
domain = "files.example.com"
[sites.tls]
cert = "c.pem"
key = "c.pem"

[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = "c.pem"
key = "c.pem"

[[reverse_proxy.routes]]
domain = "media.example.com"
upstreams = ["10.0.0.20:443"]
tls_termination = false

[[reverse_proxy.routes]]
domain = "api.example.com"
upstreams = ["10.0.0.30:8080"]
`)
	if err != nil {
		t.Fatalf("mixed config rejected:\n%v", err)
	}
	rs := cfg.ReverseProxy.Routes
	if !cfg.Passthrough() || !cfg.Terminating() || !rs[0].Passthrough || rs[1].Passthrough || rs[1].IdleTimeout.D().Seconds() != 50 {
		t.Errorf("mixed modes wrong: %+v", rs)
	}
}

func TestProxyConfigErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "c.pem"), "x")
	route := "root = \".\"\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\n"           // route keys start on line 5
	pass := "[reverse_proxy]\nenabled = true\ntls_termination = false\n[[reverse_proxy.routes]]\n" // route keys start on line 5
	tests := []struct {
		name, text string
		want       []string
	}{
		{"no routes", "root = \".\"\n[reverse_proxy]\nenabled = true\n",
			[]string{"engine.toml:2: reverse_proxy: enabled but no route"}},
		{"passthrough files without certificate", "root = \".\"\n[reverse_proxy]\nenabled = true\ntls_termination = false\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"127.0.0.1:1\"]\n",
			[]string{"engine.toml:4: reverse_proxy.tls_termination: passthrough routes make the listener a TLS one"}},
		{"passthrough path", pass + "domain = \"a\"\nupstreams = [\"h:443\"]\npath_prefix = \"/api/\"\nmax_body = \"1MiB\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].path_prefix: has no meaning on a passthrough route",
				"engine.toml:8: reverse_proxy.routes[0].max_body: has no meaning on a passthrough route"}},
		{"bad proxy_protocol", pass + "domain = \"a\"\nupstreams = [\"h:443\"]\nproxy_protocol = \"v1\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].proxy_protocol: \"v1\" is not a choice"}},
		{"proxy_protocol on a terminating route", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nproxy_protocol = \"v2\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].proxy_protocol: \"v2\" is for passthrough routes"}},
		{"domain relayed and terminated", pass + "domain = \"a\"\nupstreams = [\"h:443\"]\n[[reverse_proxy.routes]]\ndomain = \"a\"\npath_prefix = \"/x/\"\nupstreams = [\"h:80\"]\ntls_termination = true\n",
			[]string{"engine.toml:8: reverse_proxy.routes[1].domain: \"a\" terminates TLS on a listener that has no certificate",
				"engine.toml:11: reverse_proxy.routes[1].tls_termination: \"a\" is relayed by one route and terminated by reverse_proxy.routes[0]"}},
		{"domain relayed and a site's", "[[sites]]\ndomain = \"A.\"\nroot = \".\"\n[sites.tls]\ncert = \"c.pem\"\nkey = \"c.pem\"\n" +
			"[reverse_proxy]\nenabled = true\ntls_termination = false\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"h:443\"]\n",
			[]string{"engine.toml:11: reverse_proxy.routes[0].domain: \"a\" is relayed by this passthrough route and served by sites[0]"}},
		{"upstream is the listener", "listen = \"127.0.0.1:8443\"\n" + route + "domain = \"a\"\nupstreams = [\"10.1.1.1:8443\", \"127.0.0.1:8443\", \"localhost:8443\", \"127.0.0.2:8443\"]\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].upstreams: entry 1 (\"127.0.0.1:8443\") is this server's own listener",
				"entry 2 (\"localhost:8443\") is this server's own listener"}},
		{"upstream is the listener on every address", pass + "domain = \"a\"\nupstreams = [\"127.0.0.9:8080\"]\n",
			[]string{"engine.toml:6: reverse_proxy.routes[0].upstreams: entry 0 (\"127.0.0.9:8080\") is this server's own listener"}},
		{"upstream is the listener, spelled otherwise", "listen = \"127.0.0.1:8443\"\n" + route + "domain = \"a\"\nupstreams = [\"127.0.0.1:08443\", \"0.0.0.0:8443\", \"[::ffff:127.0.0.1]:8443\", \"LocalHost:8443\", \"[::]:8444\"]\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].upstreams: entry 0 (\"127.0.0.1:08443\") is this server's own listener",
				"entry 1 (\"0.0.0.0:8443\") is this server's own listener", "entry 2 (\"[::ffff:127.0.0.1]:8443\") is this server's own listener",
				"entry 3 (\"LocalHost:8443\") is this server's own listener"}},
		{"upstream is a listener on localhost", "listen = \"localhost:8443\"\n" + route + "domain = \"a\"\nupstreams = [\"127.0.0.1:8443\", \"[::1]:8443\", \"127.0.0.2:8443\", \"0.0.0.0:8443\"]\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].upstreams: entry 0 (\"127.0.0.1:8443\") is this server's own listener",
				"entry 3 (\"0.0.0.0:8443\") is this server's own listener"}},
		{"upstream with a zone, or not one server", pass + "domain = \"a\"\nupstreams = [\"[::1%lo]:8080\", \"255.255.255.255:443\", \"[ff02::1%eth0]:443\", \"224.0.0.1:443\"]\n",
			[]string{"engine.toml:6: reverse_proxy.routes[0].upstreams: entry 0 (\"[::1%lo]:8080\") is this server's own listener",
				"entry 1 (\"255.255.255.255:443\") is a multicast or broadcast address", "entry 2 (\"[ff02::1%eth0]:443\") is a multicast or broadcast address",
				"entry 3 (\"224.0.0.1:443\") is a multicast or broadcast address"}},
		{"upstream is the listener on [::]", "listen = \"[::]:8443\"\n" + pass + "domain = \"a\"\nupstreams = [\"0.0.0.0:8443\"]\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].upstreams: entry 0 (\"0.0.0.0:8443\") is this server's own listener"}},
		{"prefix not as matched", route + "domain = \"a\"\nupstreams = [\"h:80\"]\npath_prefix = \"/ap%69/\"\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"h:80\"]\npath_prefix = \"//api/\"\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"h:80\"]\npath_prefix = \"/api/../admin/\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].path_prefix: \"/ap%69/\" is not a path as requests are matched by",
				"engine.toml:11: reverse_proxy.routes[1].path_prefix: \"//api/\" is not a path",
				"engine.toml:15: reverse_proxy.routes[2].path_prefix: \"/api/../admin/\" is not a path"}},
		{"no upstreams", route + "domain = \"a\"\n",
			[]string{"engine.toml:4: reverse_proxy.routes[0].upstreams: missing"}},
		{"no domain", route + "upstreams = [\"127.0.0.1:80\"]\n",
			[]string{"engine.toml:4: reverse_proxy.routes[0].domain: missing"}},
		{"bad upstream", route + "domain = \"a\"\nupstreams = [\"127.0.0.1\", \"h:0\", \"a b:80\"]\n",
			[]string{"engine.toml:6: reverse_proxy.routes[0].upstreams: entry 0 (\"127.0.0.1\") is not an address",
				"entry 1 (\"h:0\") has port \"0\"", "entry 2 (\"a b:80\") has host \"a b\""}},
		{"bad lb", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nlb = \"random\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].lb: \"random\" is not a policy"}},
		{"bad prefix", route + "domain = \"a\"\nupstreams = [\"h:80\"]\npath_prefix = \"api\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].path_prefix: \"api\" is not a path prefix"}},
		{"duplicate route", route + "domain = \"a\"\nupstreams = [\"h:80\"]\n[[reverse_proxy.routes]]\ndomain = \"A\"\nupstreams = [\"h:81\"]\n",
			[]string{"engine.toml:7: reverse_proxy.routes[1].path_prefix: \"/\" on \"A\" is already the prefix of reverse_proxy.routes[0]"}},
		{"unknown route key", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nkeepalive = 64\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].keepalive: unknown key; expected one of domain, path_prefix, upstreams"}},
		{"bare number timeout", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nconnect_timeout = 5\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].connect_timeout: 5 is too short to be meant"}},
		{"max_conns range", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nmax_conns = -1\n",
			[]string{"max_conns: -1 is out of range"}},
		{"max_idle range", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nmax_idle = -1\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].max_idle: -1 is out of range"}},
		{"ca without tls", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nca = \"c.pem\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].ca: set but upstream_tls is false"}},
		{"cache without path", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ncache = true\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].cache: true, but [cache] path is not set"}},
		{"cache path a file", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ncache = true\n[cache]\npath = \"c.pem\"\n",
			[]string{"engine.toml:9: cache.path: ", "is a file; expected a directory"}},
		{"s3 without cache", route + "domain = \"a\"\nupstreams = [\"h:80\"]\norigin = \"s3\"\ns3_bucket = \"models\"\ns3_credentials = \"c.pem\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].origin: \"s3\" needs cache = true", "s3_credentials: ", "can be read by other users"}},
		{"bad bucket", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ncache = true\norigin = \"s3\"\ns3_bucket = \"Bad_Bucket\"\n[cache]\npath = \".\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].origin: \"s3\" without s3_credentials takes its keys from AWS_ACCESS_KEY_ID", "engine.toml:9: reverse_proxy.routes[0].s3_bucket: \"Bad_Bucket\" is not a bucket name"}},
		{"s3 keys without origin", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ns3_bucket = \"models\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].s3_bucket: is for an S3 origin"}},
		{"unknown origin", route + "domain = \"a\"\nupstreams = [\"h:80\"]\norigin = \"ftp\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].origin: unknown origin \"ftp\""}},
		{"manifest not a manifest", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ncache = true\ncache_manifest = \"c.pem\"\n[cache]\npath = \".\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].cache_manifest: ", "manifest line 1"}},
		{"manifest without cache", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ncache_manifest = \"c.pem\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].cache_manifest: is for a cached route"}},
		{"cache on passthrough", pass + "domain = \"a\"\nupstreams = [\"127.0.0.1:1\"]\ncache = true\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].cache: has no meaning on a passthrough route"}},
		{"tls key without upstream tls", route + "domain = \"a\"\nupstreams = [\"h:80\"]\ntls_server_name = \"o.test\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].tls_server_name: set but upstream_tls is false"}},
		{"ca not PEM", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nupstream_tls = true\nca = \"c.pem\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].ca: ", "c.pem\" holds no PEM certificate"}},
		{"bad tls server name", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nupstream_tls = true\ntls_server_name = \"a b\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].tls_server_name: \"a b\" is not a host name"}},
		{"client cert without key", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nupstream_tls = true\ntls_client_cert = \"c.pem\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].tls_client_cert: set without tls_client_key"}},
		{"client cert unreadable", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nupstream_tls = true\ntls_client_cert = \"c.pem\"\ntls_client_key = \"none.pem\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].tls_client_cert: cannot load the client certificate"}},
		{"skip verify and ca", route + "domain = \"a\"\nupstreams = [\"h:80\"]\nupstream_tls = true\ntls_insecure_skip_verify = true\nca = \"c.pem\"\n",
			[]string{"engine.toml:8: reverse_proxy.routes[0].tls_insecure_skip_verify: true accepts any certificate, and ca is set"}},
		{"tls keys on passthrough", pass + "domain = \"a\"\nupstreams = [\"127.0.0.1:1\"]\ntls_server_name = \"o.test\"\n",
			[]string{"engine.toml:7: reverse_proxy.routes[0].tls_server_name: has no meaning on a passthrough route"}},
		{"route domain without certificate", "[[sites]]\ndomain = \"files.example\"\nroot = \".\"\n[sites.tls]\ncert = \"c.pem\"\nkey = \"c.pem\"\n" +
			"[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"api.example\"\nupstreams = [\"h:80\"]\n",
			[]string{"engine.toml:10: reverse_proxy.routes[0].domain: \"api.example\" has no certificate on this TLS listener"}},
		{"bad trusted proxy", "root = \".\"\n[reverse_proxy]\nenabled = true\ntrusted_proxies = [\"10.0.0.0/33\"]\n[[reverse_proxy.routes]]\ndomain = \"a\"\nupstreams = [\"h:80\"]\n",
			[]string{"engine.toml:4: reverse_proxy.trusted_proxies: entry 0 (\"10.0.0.0/33\") is not an address or prefix"}},
		{"proxy send buffers", "root = \".\"\n[runtime.settings]\nproxy_h2_tls_max_send_buffer_bytes = \"1MiB\"\nproxy_h2_tls_connection_send_buffer_bytes = \"64KiB\"\n",
			[]string{"engine.toml:4: runtime.settings.proxy_h2_tls_connection_send_buffer_bytes: 64KiB is out of range"}},
		{"proxy total send buffer", "root = \".\"\n[runtime.settings]\nproxy_h2_tls_connection_send_buffer_bytes = \"1MiB\"\nproxy_h2_tls_total_send_buffer_bytes = \"512KiB\"\n",
			[]string{"engine.toml:4: runtime.settings.proxy_h2_tls_total_send_buffer_bytes: 512KiB is out of range"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadText(t, dir, tt.text)
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.text)
			}
			rest := err.Error()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error does not contain %q (in order):\n%s", w, err)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestOnListener: which upstream addresses reach the server's own
// listener, however spelled; and which do not.
func TestOnListener(t *testing.T) {
	type row struct {
		listen, upstream string
		udp, want        bool
	}
	tests := []row{
		{"127.0.0.1:8443", "127.0.0.1:8443", false, true},
		{"127.0.0.1:8443", "0.0.0.0:8443", false, true},
		{"127.0.0.1:8443", "[::ffff:127.0.0.1]:8443", false, true},
		{"127.0.0.1:8443", "[::]:8443", true, false}, // :: goes to ::1
		{"127.0.0.1:8443", "127.0.0.2:8443", true, false},
		{"127.0.0.1:8443", "127.0.0.1:8444", true, false},
		{"10.9.9.9:8443", "0.0.0.0:8443", true, false}, // 0.0.0.0 goes to 127.0.0.1, not 10.9.9.9
		{"10.9.9.9:8443", "10.9.9.9:8443", false, true},
		{"localhost:8443", "127.0.0.1:8443", false, true},
		{"localhost:8443", "[::1]:8443", true, true},      // both loopback addresses
		{"localhost:8443", "127.0.0.2:8443", true, true},  // all of 127/8: the wildcard, on the loopback device
		{"localhost:8443", "192.0.2.1:8443", true, false}, // not an address of this host
		{":8443", "127.0.0.9:8443", false, true},
		{":8443", "[::1]:8443", false, true},
		{":8443", "[::1%lo]:8443", false, true},
		{"[::]:8443", "0.0.0.0:8443", false, true},
		{"0.0.0.0:8443", "[::]:8443", true, true},
		{"0.0.0.0:8443", "[::1]:8443", true, true},   // UDP on 0.0.0.0 takes IPv6 too
		{"0.0.0.0:8443", "[::1]:8443", false, false}, // TCP does not
		{":8443", "192.0.2.1:8443", true, false},     // not an address of this host
		{":0", "127.0.0.1:0", true, false},           // the kernel picks the port
		{"", "127.0.0.1:8080", false, true},          // the default listen
	}
	// An address of one of this host's interfaces, with a zone.
	addrs, _ := net.InterfaceAddrs()
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil && !p.Addr().IsLoopback() {
			a := p.Addr()
			if a.Is6() {
				a = a.WithZone("eth9")
			}
			tests = append(tests, row{":8443", netip.AddrPortFrom(a, 8443).String(), true, true})
		}
	}
	for _, tt := range tests {
		c := &config.Config{Listen: tt.listen}
		if got := c.OnListener(netip.MustParseAddrPort(tt.upstream), tt.udp); got != tt.want {
			t.Errorf("listen %q, upstream %s, udp %v: OnListener = %v, want %v", tt.listen, tt.upstream, tt.udp, got, tt.want)
		}
	}
}

// TestUnicast: multicast and broadcast addresses are no upstream's,
// the broadcast address of this host's networks among them.
func TestUnicast(t *testing.T) {
	for a, want := range map[string]bool{"10.0.0.1": true, "::1": true, "fe80::1%eth0": true, "255.255.255.255": false,
		"::ffff:255.255.255.255": false, "224.0.0.1": false, "ff02::1%eth0": false, "ff05::2": false} {
		if got := config.Unicast(netip.MustParseAddr(a)); got != want {
			t.Errorf("Unicast(%s) = %v, want %v", a, got, want)
		}
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ia := range addrs {
		p, err := netip.ParsePrefix(ia.String())
		if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
			continue
		}
		last := netip.PrefixFrom(p.Addr(), p.Bits()).Masked().Addr().As4()
		for i, ones := 0, p.Bits(); i < 4; i, ones = i+1, ones-8 {
			switch {
			case ones <= 0:
				last[i] = 0xff
			case ones < 8:
				last[i] |= 0xff >> ones
			}
		}
		if b := netip.AddrFrom4(last); config.Unicast(b) {
			t.Errorf("Unicast(%s) = true for the broadcast address of %s", b, p)
		}
	}
}
