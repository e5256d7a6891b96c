package config

import (
	"crypto/tls"
	"runtime"
	"strconv"
	"strings"
)

// Config is the whole server configuration, as read from engine.toml and
// overridden by command-line flags. The zero value of every field means
// its documented default; Validate fills the defaults in.
type Config struct {
	// Listen is the TCP address to serve on. Zero means ":8080".
	Listen string `toml:"listen"`
	// Workers is the number of reactors. Zero means one per CPU.
	Workers int `toml:"workers"`
	// PinWorkers binds each reactor thread to its CPU. Zero (false) lets
	// the scheduler place them: better when clients share the host.
	PinWorkers bool `toml:"pin_workers"`
	// Root is the default site's document root. Empty means no default
	// site of its own: the first [[sites]] entry (or the one marked
	// default) answers requests for unknown hosts.
	Root string `toml:"root"`
	// AccessLog is "off" (the zero value), "stdout", "stderr" or a file path.
	AccessLog string `toml:"access_log"`
	// PidFile, when set, is where serve writes its process ID (and the
	// new process of a binary upgrade, once it serves): engine reload
	// and engine upgrade read it.
	PidFile string `toml:"pid_file"`
	// AccessLogFormat is "combined" (the zero value: nginx's format) or
	// "json" (one object a line).
	AccessLogFormat string `toml:"access_log_format"`
	// AccessLogBuffer bounds the log lines waiting for the disk. Lines past
	// it are dropped and counted rather than slowing the reactors. Zero
	// means 1MiB.
	AccessLogBuffer Size `toml:"access_log_buffer"`
	// LogLevel is "debug", "info" (the zero value), "warn" or "error".
	LogLevel string `toml:"log_level"`
	// ShutdownGrace bounds how long in-flight responses may continue after
	// SIGTERM or SIGINT, or waits for them (UntilDone). Zero means 30s.
	ShutdownGrace Grace `toml:"shutdown_grace"`

	Sites     []Site    `toml:"sites"`
	Integrity Integrity `toml:"integrity"`
	Kernel    Kernel    `toml:"kernel"`
	Limits    Limits    `toml:"limits"`
	Runtime   Runtime   `toml:"runtime"`
	H3        H3        `toml:"h3"`

	ReverseProxy ReverseProxy `toml:"reverse_proxy"`
	ACME         ACME         `toml:"acme"`
	RedirectHTTP RedirectHTTP `toml:"redirect_http"`
	Admin        Admin        `toml:"admin"`
	WebTransport WebTransport `toml:"webtransport"`
	Signing      Signing      `toml:"signing"`
	Cache        Cache        `toml:"cache"`

	// Where each key came from, for error messages. Not from TOML.
	src configSource `toml:"-"`
	// selfSigned is serve --self-signed: sites without a certificate get
	// an in-memory self-signed one, and the listener speaks TLS.
	selfSigned bool
	// relaxed says what --self-signed relaxed of what the configuration
	// would require with a certificate of its own (Relaxed).
	relaxed []string
}

// Site is one virtual host.
type Site struct {
	// Domain is the host name this site answers: "media.example.com", a
	// wildcard "*.example.com", or "*" for any host.
	Domain string `toml:"domain"`
	// Root is the document root. Empty means the top-level root.
	Root string `toml:"root"`
	// Default makes this site take the names no site and no route
	// names: their requests, and on TLS their handshakes, under this
	// site's certificate and minimum version (a "*" site takes them
	// first). Zero (false): on TLS, without a "*" site, a
	// top-level root or a "*" route, a handshake for such a name is
	// refused (unrecognized_name) and a request naming one gets 421; on
	// plain HTTP such requests go to the top-level root's site, or else
	// the first site.
	Default bool `toml:"default"`
	// Index lists the files served for a directory. Zero means
	// ["index.html"].
	Index []string `toml:"index"`
	// DirectoryListing serves an HTML listing of a directory without an
	// index file. Zero (false) answers 404 instead.
	DirectoryListing bool `toml:"directory_listing"`
	// HiddenFiles is "serve" (the zero value, as nginx does) or "deny":
	// answer 404 for any path with a segment starting with "." (/.git/,
	// /.env) except a leading /.well-known/, and leave such names out of
	// directory listings.
	HiddenFiles string `toml:"hidden_files"`
	// FollowSymlinksOutsideRoot lets symbolic links point outside Root.
	// Zero (false) refuses such paths with 404.
	FollowSymlinksOutsideRoot bool `toml:"follow_symlinks_outside_root"`
	// Precompressed serves file.br, file.zst or file.gz beside a file
	// when the client accepts that encoding and the sidecar is not older
	// than the file (engine precompress writes them). Nil means true.
	Precompressed *bool `toml:"precompressed"`
	// LimitRate paces each connection of this site to this many bytes
	// per second with SO_MAX_PACING_RATE. Zero means unlimited.
	LimitRate Size `toml:"limit_rate"`
	// HSTS is the Strict-Transport-Security value sent on this site's
	// TLS responses ("max-age=63072000; includeSubDomains"). Zero sends
	// none: once a browser has it, the site cannot go back to plain HTTP
	// for that long, so it is for the operator to choose.
	HSTS string `toml:"hsts"`
	// Paths are policies for path prefixes: auth, address rules and
	// response fields ([[sites.paths]]). A path no prefix takes has the
	// defaults (no auth, Cache-Control "no-cache" on files).
	Paths []PathPolicy `toml:"paths"`

	Protocols Protocols     `toml:"protocols"`
	TLS       TLS           `toml:"tls"`
	Integrity SiteIntegrity `toml:"integrity"`
}

// SiteIntegrity overrides [integrity] for one site.
type SiteIntegrity struct {
	// Mode is "serve" or "require"; zero means [integrity] mode.
	Mode string `toml:"mode"`
}

// Integrity governs the BLAKE3 digests of served files.
type Integrity struct {
	// Mode is "serve" (the zero value: a file is served at once, with
	// Repr-Digest once it has been hashed) or "require" (503 with
	// Retry-After until it has been).
	Mode string `toml:"mode"`
	// StateDir keeps what the engine learned about files across
	// restarts: the digest cache (StateDir/digests, unless Cache names
	// another file) and the files' outboard trees (StateDir/outboard).
	// Zero means $STATE_DIRECTORY/integrity when set (systemd's
	// StateDirectory=), else /var/lib/engine/integrity for root, else
	// $XDG_STATE_HOME/engine/integrity (~/.local/state/engine/integrity).
	// "off" keeps nothing: every file is hashed again after a restart,
	// and outboard trees live in a temporary directory removed at exit.
	// Created at start (mode 0750) when missing.
	StateDir string `toml:"state_dir"`
	// Cache is the file the digest cache is saved to (every minute and
	// at shutdown) and loaded from, so a restart does not rehash
	// everything. Zero means StateDir/digests ("off" with StateDir "off").
	Cache string `toml:"cache"`
	// Outboard serves every file's BLAKE3 outboard tree (Bao format, in
	// 256 KiB chunk groups) at the file's path + ".obao", and links it
	// from the file's responses, so a client can check any range of the
	// file against its digest. Nil means on.
	Outboard *bool `toml:"outboard"`
	// Manifest is the b3sum-format file read at each site root. Zero
	// means "B3SUMS"; "off" reads none.
	Manifest string `toml:"manifest"`
	// OnMismatch is what happens when a file's bytes contradict the
	// manifest: "serve" (the zero value: serve them, with their true
	// digest) or "refuse" (500). Either way it is logged as an error.
	OnMismatch string `toml:"on_mismatch"`
	// Workers hash files in the background. Zero means 1.
	Workers int `toml:"workers"`
	// Digests are the digests computed of every file, in the same read:
	// "blake3" (always: ETags and outboard trees hang on it) and
	// "sha-256" (a second Repr-Digest member, for clients that check
	// what Hugging Face, GitHub releases and distributions publish).
	// Zero means ["blake3"].
	Digests []string `toml:"digests"`
}

// Protocols enables protocols per site. Nil means enabled.
type Protocols struct {
	H1 *bool `toml:"h1"`
	H2 *bool `toml:"h2"`
	H3 *bool `toml:"h3"`
	// H2C accepts HTTP/2 with prior knowledge (no TLS) on the plain
	// listener. Nil means off: clients that try it get an HTTP/1.1 error.
	H2C *bool `toml:"h2c"`
}

// TLS is a site's certificate: Cert and Key, or ACME, or none.
type TLS struct {
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// ACME gets the certificate from the [acme] CA and renews it,
	// instead of Cert and Key.
	ACME bool `toml:"acme"`
	// MinVersion is "1.3" (the zero value) or "1.2".
	MinVersion string `toml:"min_version"`
	// SessionTickets lets clients resume sessions with tickets (faster
	// reconnects). Nil means on; false makes every handshake a full one,
	// for a policy of forward secrecy per connection.
	SessionTickets *bool `toml:"session_tickets"`
	// KeyExchanges are the TLS key exchanges (groups) this site accepts,
	// as operators write them: "X25519MLKEM768", "SecP256r1MLKEM768",
	// "SecP384r1MLKEM1024" (post-quantum hybrids, TLS 1.3 only),
	// "X25519", "P-256" ("secp256r1", "prime256v1"), "P-384"
	// ("secp384r1"), "P-521" ("secp521r1"); case is ignored. The list
	// is a set, not an order: of those the client offers, crypto/tls
	// picks a post-quantum hybrid first, then one the client sent a key
	// share for (no extra round trip), then by its own order, the one
	// above. Zero means all of them, so X25519MLKEM768 for clients that
	// offer it.
	KeyExchanges []string `toml:"key_exchanges"`
	// Groups is KeyExchanges resolved by Validate, in the order written;
	// nil means crypto/tls's default. Not from TOML.
	Groups []tls.CurveID `toml:"-"`
}

// Kernel chooses the kernel fast paths.
type Kernel struct {
	// KTLS is "require", "auto" or "off". Zero means "require" when a TLS
	// site is configured.
	KTLS string `toml:"ktls"`
	// PromoteAfter is how much of a response body goes through the
	// userspace TLS record layer before kernel TLS takes over. Zero in the
	// file means the default, 1 MiB; write "0B" to promote at once.
	PromoteAfter *Size `toml:"promote_after"`
	// BulkThreshold is the body size from which a response is bulk and its
	// socket switches to BulkCongestion. Zero means 1 MiB.
	BulkThreshold Size `toml:"bulk_threshold"`
	// BulkCongestion is the TCP congestion control for bulk responses.
	// Zero means "bbr"; "off" keeps the system default.
	BulkCongestion string `toml:"bulk_congestion"`
	// BBR is "require", "auto" or "off". Zero means "require" when
	// BulkCongestion is "bbr".
	BBR string `toml:"bbr"`
}

// Limits bounds what one client can make the server hold.
type Limits struct {
	// MaxHeaderBytes bounds a request head. Zero means 16 KiB.
	MaxHeaderBytes Size `toml:"max_header_bytes"`
	// MaxHeaders bounds the number of header lines. Zero means 100.
	MaxHeaders int `toml:"max_headers"`
	// MaxURIBytes bounds the request target. Zero means 8 KiB.
	MaxURIBytes Size `toml:"max_uri_bytes"`
	// HeaderTimeout bounds the time from the first byte of a request head
	// to its end. Zero means 30s.
	HeaderTimeout Duration `toml:"header_timeout"`
	// BodyTimeout bounds the wait for a request body the client
	// announced (Content-Length or chunked): the engine answers GET and
	// HEAD and discards a body, which must then arrive whole within this
	// time of the response being written, or the connection closes (as
	// nginx's client_body_timeout and lingering_time do). Zero means 30s.
	BodyTimeout Duration `toml:"body_timeout"`
	// IdleTimeout closes keep-alive connections with no request. Zero
	// means 75s.
	IdleTimeout Duration `toml:"idle_timeout"`
	// SendTimeout closes a connection whose client accepts no bytes for
	// this long. Zero means 60s.
	SendTimeout Duration `toml:"send_timeout"`
	// MaxConnections bounds open client connections, split evenly among
	// the workers. At its share a worker admits a new connection by
	// closing the one that waits for its client nearest its deadline
	// (keep-alive idle, no request yet), never one with a response in
	// progress, and refuses it when there is none. Zero means 8192.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerAddress bounds the connections one client address
	// holds, TCP and QUIC together, over every worker (IPv6 addresses by
	// their AddressIPv6Prefix, which one client usually owns): past it a
	// new connection is closed at once, counted and logged. Addresses in
	// [reverse_proxy] trusted_proxies (a load balancer carrying many
	// clients) are not limited. Zero means max_connections/8, at least
	// 64 and at most max_connections; max_connections turns it off.
	MaxConnectionsPerAddress int `toml:"max_connections_per_address"`
	// AddressIPv6Prefix is the prefix length by which IPv6 clients are
	// counted (max_connections_per_address, the reverse proxy's shares;
	// WebTransport's max_sessions_per_address always counts by /64).
	// Zero means 64.
	AddressIPv6Prefix int `toml:"address_ipv6_prefix"`
	// MinSendRate is the rate, in bytes a second over MinSendRateWindow,
	// below which a response in flight may be closed to admit a new
	// client at max_connections, the slowest first, once no connection
	// waits for its client (in the spirit of Apache's MinRate): a client
	// reading a few bytes a second keeps its slot only while nobody else
	// needs it. TCP, TLS and QUIC alike. Zero means 4KiB.
	MinSendRate Size `toml:"min_send_rate"`
	// MinSendRateWindow is what MinSendRate is measured over: one to two
	// of these. Zero means 20s.
	MinSendRateWindow Duration `toml:"min_send_rate_window"`
	// MemoryLimit is the Go runtime's soft memory limit for the server
	// (GOMEMLIMIT, which wins when set): past it the collector works
	// harder rather than letting the heap grow to five times what is
	// live (the engine runs with GOGC=400). It bounds what attacks that
	// churn connections leave behind; what is live (about 20 KiB per TCP
	// connection, 160 KiB per QUIC connection) is bounded by
	// max_connections. Zero means 64 MiB plus 320 KiB per
	// max_connections (384 MiB at 1024).
	MemoryLimit Size `toml:"memory_limit"`
}

// Runtime holds tuning knobs in the seed product's shape.
type Runtime struct {
	Settings RuntimeSettings `toml:"settings"`
}

// RuntimeSettings are protocol tuning knobs.
type RuntimeSettings struct {
	// H2TLSWriteBuffer bounds a connection's userspace TLS write batch:
	// heads, HTTP/2 frames and file bytes are laid into it and sealed as
	// records, this much at a time (HTTP/1.1 too, despite the name). Zero
	// means 128 KiB (two 64 KiB DATA frames).
	H2TLSWriteBuffer Size `toml:"h2_tls_write_buffer_bytes"`
	// H2SendBuffer is how much HTTP/2 output one connection queues ahead
	// of the socket when frames go out by sendfile (plain h2c, or after
	// kernel TLS took over). Zero means 256 KiB.
	H2SendBuffer Size `toml:"h2_connection_send_buffer_bytes"`
	// H2MaxConcurrentStreams is advertised to clients and enforced. Zero
	// means 128.
	H2MaxConcurrentStreams int `toml:"h2_max_concurrent_streams"`
	// ProxyH2TLSMaxSendBuffer bounds the proxied response bytes one
	// HTTP/2 stream holds ahead of its client (read from the upstream,
	// not yet sent). Zero means 128 KiB.
	ProxyH2TLSMaxSendBuffer Size `toml:"proxy_h2_tls_max_send_buffer_bytes"`
	// ProxyH2TLSConnectionSendBuffer bounds the same for all the streams
	// of one HTTP/2 connection. Zero means 32 MiB.
	ProxyH2TLSConnectionSendBuffer Size `toml:"proxy_h2_tls_connection_send_buffer_bytes"`
	// ProxyH2TLSTotalSendBuffer bounds the same for every HTTP/2
	// connection of the server together, so that many connections of
	// clients that stop reading cannot hold more. Zero means 256 MiB.
	ProxyH2TLSTotalSendBuffer Size `toml:"proxy_h2_tls_total_send_buffer_bytes"`
}

// H3 tunes HTTP/3, served on UDP at the listen port for TLS sites
// whose protocols allow h3.
type H3 struct {
	// BulkPaceRate paces each bulk response (bulk_threshold and up) to
	// this many bytes per second, per stream, on top of quic-go's
	// per-connection pacing. Zero means unpaced. A site's limit_rate,
	// when lower, applies to every response of that site.
	BulkPaceRate Size `toml:"bulk_pace_rate"`
	// MaxStreams is how many request streams a client may have open on
	// one connection. Zero means 100.
	MaxStreams int `toml:"max_streams"`
	// StreamReceiveWindow and ConnectionReceiveWindow bound the windows
	// granted to clients for request bodies. Zero means 6 MiB and 15 MiB.
	StreamReceiveWindow     Size `toml:"stream_receive_window"`
	ConnectionReceiveWindow Size `toml:"connection_receive_window"`
	// UDPBuffer is the UDP socket buffer size asked for, forced past the
	// sysctl limits when running with CAP_NET_ADMIN. Zero means 7 MiB.
	UDPBuffer Size `toml:"udp_buffer_bytes"`
	// Allow0RTT accepts requests in 0-RTT data, which an attacker can
	// replay. Zero (false) means off.
	Allow0RTT bool `toml:"allow_0rtt"`
}

// configSource records the file and the line of every key, and which
// values came from flags.
type configSource struct {
	file  string
	dir   string            // relative paths in the file are relative to this
	lines map[string]int    // key path ("sites[0].tls.cert") -> line
	flags map[string]string // key path -> flag that set it
}

// Error is one mistake in the configuration.
type Error struct {
	File string // empty for flags
	Line int    // zero when unknown
	Key  string // key path, or the flag
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every mistake found at once, so an operator fixes them
// in one pass.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// File returns the config file name, or "" when there is none.
func (c *Config) File() string { return c.src.file }

// Line returns the line of the file that key ("sites[0].tls.cert") is
// written on, or 0 when the file does not write it.
func (c *Config) Line(key string) int { return c.src.lines[key] }

// SelfSigned reports whether serve --self-signed asked for an in-memory
// self-signed certificate for sites without one.
func (c *Config) SelfSigned() bool { return c.selfSigned }

// Relaxed lists what serve --self-signed relaxed of what this
// configuration requires when it serves a certificate of its own, for
// serve to say: trying the server out with --self-signed must not hide
// what a real deployment of the same file will need. Valid after
// Validate.
func (c *Config) Relaxed() []string { return c.relaxed }

// HasTLS reports whether the listener speaks TLS: a site has a
// certificate (files or ACME), or serve --self-signed made one.
func (c *Config) HasTLS() bool {
	if c.selfSigned || c.ReverseProxy.Enabled && c.ReverseProxy.TLS.Has() {
		return true
	}
	for i := range c.Sites {
		if c.Sites[i].TLS.Has() {
			return true
		}
	}
	return false
}

// Has reports whether t gives a certificate: files, or ACME.
func (t *TLS) Has() bool { return t.Cert != "" || t.ACME }

// H3Enabled reports whether HTTP/3 is served: the listener speaks TLS and
// some site allows h3 (the top-level root's site allows every protocol).
// WorkerCount is the number of reactors serve runs: workers, or one per
// CPU.
func (c *Config) WorkerCount() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.NumCPU()
}

func (c *Config) H3Enabled() bool {
	if !c.HasTLS() {
		return false
	}
	if c.Root != "" || len(c.Sites) == 0 {
		return true
	}
	for i := range c.Sites {
		if On(c.Sites[i].Protocols.H3) {
			return true
		}
	}
	return false
}

// On reads an optional switch such as Protocols.H2 or Site.Precompressed:
// nil means on.
func On(b *bool) bool { return b == nil || *b }
