package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
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
	// LogLevel is "debug", "info" (the zero value), "warn" or "error".
	LogLevel string `toml:"log_level"`
	// ShutdownGrace bounds how long in-flight responses may continue after
	// SIGTERM or SIGINT. Zero means 30s.
	ShutdownGrace Duration `toml:"shutdown_grace"`

	Sites     []Site    `toml:"sites"`
	Integrity Integrity `toml:"integrity"`
	Kernel    Kernel    `toml:"kernel"`
	Limits    Limits    `toml:"limits"`
	Runtime   Runtime   `toml:"runtime"`
	H3        H3        `toml:"h3"`

	// Where each key came from, for error messages. Not from TOML.
	src configSource `toml:"-"`
	// selfSigned is serve --self-signed: sites without a certificate get
	// an in-memory self-signed one, and the listener speaks TLS.
	selfSigned bool
}

// Site is one virtual host.
type Site struct {
	// Domain is the host name this site answers: "media.example.com", a
	// wildcard "*.example.com", or "*" for any host.
	Domain string `toml:"domain"`
	// Root is the document root. Empty means the top-level root.
	Root string `toml:"root"`
	// Default makes this site answer requests for hosts no site names.
	// Zero means the top-level root's site, or else the first site.
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
	// when the client accepts that encoding. Nil means true.
	Precompressed *bool `toml:"precompressed"`
	// LimitRate paces each connection of this site to this many bytes
	// per second with SO_MAX_PACING_RATE. Zero means unlimited.
	LimitRate Size `toml:"limit_rate"`

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
	// Cache is a file the digest cache is saved to (every minute and at
	// shutdown) and loaded from, so a restart does not rehash everything.
	// Zero: not persisted.
	Cache string `toml:"cache"`
	// Manifest is the b3sum-format file read at each site root. Zero
	// means "B3SUMS"; "off" reads none.
	Manifest string `toml:"manifest"`
	// OnMismatch is what happens when a file's bytes contradict the
	// manifest: "serve" (the zero value: serve them, with their true
	// digest) or "refuse" (500). Either way it is logged as an error.
	OnMismatch string `toml:"on_mismatch"`
	// Workers hash files in the background. Zero means 1.
	Workers int `toml:"workers"`
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

// TLS is a site's certificate. Both Cert and Key, or neither.
type TLS struct {
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// MinVersion is "1.3" (the zero value) or "1.2".
	MinVersion string `toml:"min_version"`
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
}

// Runtime holds tuning knobs in the seed product's shape.
type Runtime struct {
	Settings RuntimeSettings `toml:"settings"`
}

// RuntimeSettings are protocol tuning knobs.
type RuntimeSettings struct {
	// H2TLSWriteBuffer bounds the per-connection HTTP/2 TLS write buffer:
	// frames are read from files into it and sealed as records, this much
	// at a time. Zero means 128 KiB (two 64 KiB DATA frames).
	H2TLSWriteBuffer Size `toml:"h2_tls_write_buffer_bytes"`
	// H2SendBuffer is how much HTTP/2 output one connection queues ahead
	// of the socket when frames go out by sendfile (plain h2c, or after
	// kernel TLS took over). Zero means 256 KiB.
	H2SendBuffer Size `toml:"h2_connection_send_buffer_bytes"`
	// H2MaxConcurrentStreams is advertised to clients and enforced. Zero
	// means 128.
	H2MaxConcurrentStreams int `toml:"h2_max_concurrent_streams"`
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

// Load reads and validates the TOML file at path.
func Load(path string) (*Config, error) {
	cfg, err := Read(path)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

// Read reads the TOML file at path without validating values, so
// flags can override them before Validate.
func Read(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: fmt.Sprintf("cannot read: %v", unwrapPathError(err))}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, filepath.Dir(abs), data)
}

// Parse decodes TOML without validating values. Relative paths in it
// are resolved against dir. Unknown keys and wrong types are errors that
// name the file, line and key.
func Parse(file, dir string, data []byte) (*Config, error) {
	cfg := &Config{src: configSource{file: file, dir: dir, flags: map[string]string{}}}
	lines, perr := keyLines(data)
	cfg.src.lines = lines
	if perr != nil {
		return nil, Errors{cfg.decodeError(perr)}
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			var errs Errors
			for i := range strict.Errors {
				e := &strict.Errors[i]
				line, _ := e.Position()
				key := strings.Join(e.Key(), ".")
				if p := cfg.src.pathAt(line); p != "" {
					key = p
				}
				errs = append(errs, &Error{File: file, Line: line, Key: key,
					Msg: "unknown key; " + expectedKeys(e.Key())})
			}
			return nil, errs
		}
		return nil, Errors{cfg.decodeError(err)}
	}
	return cfg, nil
}

// decodeError turns a go-toml error into an Error with our wording.
func (c *Config) decodeError(err error) *Error {
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return &Error{File: c.src.file, Msg: err.Error()}
	}
	line, _ := de.Position()
	keyParts := de.Key()
	key := c.src.pathAt(line)
	if key == "" {
		key = strings.Join(keyParts, ".")
	}
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	if strings.Contains(msg, "cannot decode") || strings.Contains(msg, "cannot be stored") ||
		strings.Contains(msg, "cannot store") {
		if want := expectedType(key); want != "" {
			msg = "wrong type: expected " + want
		}
	}
	return &Error{File: c.src.file, Line: line, Key: key, Msg: msg}
}

// pathAt returns the key path defined on line, if exactly one is.
func (s *configSource) pathAt(line int) string {
	if line <= 0 {
		return ""
	}
	found := ""
	for k, l := range s.lines {
		if l == line && (found == "" || len(k) > len(found)) {
			found = k
		}
	}
	return found
}

// errAt builds an error for key, with its file and line when it came from
// the file, or its flag when a flag set it.
func (c *Config) errAt(key, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if flag, ok := c.src.flags[key]; ok {
		return &Error{Key: flag, Msg: msg}
	}
	line, ok := c.src.lines[key]
	if !ok {
		// The key was not written; name the section that was.
		for k := key; k != ""; {
			i := strings.LastIndexAny(k, ".[")
			if i < 0 {
				break
			}
			k = k[:i]
			if l, ok := c.src.lines[k]; ok {
				line = l
				break
			}
		}
	}
	return &Error{File: c.src.file, Line: line, Key: key, Msg: msg}
}

// SetFlag overrides a key from a command-line flag.
func (c *Config) SetFlag(flag string, value string) error {
	if c.src.flags == nil {
		c.src.flags = map[string]string{}
	}
	switch flag {
	case "root":
		c.Root = value
		c.src.flags["root"] = "--root"
	case "listen":
		c.Listen = value
		c.src.flags["listen"] = "--listen"
	case "self-signed":
		c.selfSigned = value == "true"
		c.src.flags["self-signed"] = "--self-signed"
	case "workers":
		n, err := strconv.Atoi(value)
		if err != nil {
			return &Error{Key: "--workers", Msg: fmt.Sprintf("%q is not a whole number", value)}
		}
		c.Workers = n
		c.src.flags["workers"] = "--workers"
	default:
		return fmt.Errorf("unknown flag %s", flag)
	}
	return nil
}

// File returns the config file name, or "" when there is none.
func (c *Config) File() string { return c.src.file }

// Line returns the line of the file that key ("sites[0].tls.cert") is
// written on, or 0 when the file does not write it.
func (c *Config) Line(key string) int { return c.src.lines[key] }

// SelfSigned reports whether serve --self-signed asked for an in-memory
// self-signed certificate for sites without one.
func (c *Config) SelfSigned() bool { return c.selfSigned }

// resolvePath makes p absolute, relative to the config file's directory
// for paths from the file, or to the working directory for flags.
func (c *Config) resolvePath(key, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if _, fromFlag := c.src.flags[key]; fromFlag || c.src.dir == "" {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	return filepath.Join(c.src.dir, p)
}

// Validate checks every value, fills in defaults and reports all mistakes.
func (c *Config) Validate() error {
	var errs Errors
	add := func(e *Error) { errs = append(errs, e) }

	if c.Listen == "" {
		c.Listen = ":8080"
	}
	if host, port, err := net.SplitHostPort(c.Listen); err != nil {
		add(c.errAt("listen", "%q is not an address; expected host:port such as \"0.0.0.0:8080\" or \":443\"", c.Listen))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		add(c.errAt("listen", "port %q is not a number from 0 to 65535", port))
	} else if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		add(c.errAt("listen", "host %q is not an IP address; expected an address such as 0.0.0.0, [::] or 127.0.0.1", host))
	}
	if c.Workers < 0 || c.Workers > 1024 {
		add(c.errAt("workers", "%d is out of range; expected 0 (one per CPU) to 1024", c.Workers))
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		add(c.errAt("log_level", "%q is not a level; expected \"debug\", \"info\", \"warn\" or \"error\"", c.LogLevel))
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(30e9)
	}
	switch c.AccessLog {
	case "", "off", "stdout", "stderr":
	default:
		c.AccessLog = c.resolvePath("access_log", c.AccessLog)
		if st, err := os.Stat(filepath.Dir(c.AccessLog)); err != nil || !st.IsDir() {
			add(c.errAt("access_log", "directory of %q does not exist; expected \"off\", \"stdout\", \"stderr\" or a file in an existing directory", c.AccessLog))
		}
	}

	if c.Root != "" {
		c.Root = c.resolvePath("root", c.Root)
		if err := checkDir(c.Root); err != nil {
			add(c.errAt("root", "%v; expected the directory to serve", err))
		}
	}
	if c.Root == "" && len(c.Sites) == 0 {
		add(&Error{File: c.src.file, Key: "root",
			Msg: "nothing to serve; set root (or --root DIR) or add a [[sites]] table with a domain and a root"})
	}

	domains := map[string]int{}
	defaults := 0
	for i := range c.Sites {
		s := &c.Sites[i]
		key := fmt.Sprintf("sites[%d]", i)
		if s.Domain == "" {
			add(c.errAt(key+".domain", "missing; every [[sites]] table needs a domain such as \"media.example.com\", \"*.example.com\" or \"*\""))
		} else if !validDomain(s.Domain) {
			add(c.errAt(key+".domain", "%q is not a host name; expected a name such as \"media.example.com\", \"*.example.com\" or \"*\"", s.Domain))
		} else {
			d := strings.ToLower(strings.TrimSuffix(s.Domain, "."))
			if j, dup := domains[d]; dup {
				add(c.errAt(key+".domain", "%q is already the domain of sites[%d]; each domain may appear once", s.Domain, j))
			}
			domains[d] = i
		}
		if s.Default {
			defaults++
		}
		if s.Root == "" {
			if c.Root == "" {
				add(c.errAt(key+".root", "missing; a site needs a root directory (or set the top-level root)"))
			}
		} else {
			s.Root = c.resolvePath(key+".root", s.Root)
			if err := checkDir(s.Root); err != nil {
				add(c.errAt(key+".root", "%v; expected the directory this site serves", err))
			}
		}
		for j, idx := range s.Index {
			if idx == "" || strings.ContainsAny(idx, "/\\\x00") || idx == "." || idx == ".." {
				add(c.errAt(fmt.Sprintf("%s.index", key), "entry %d (%q) is not a file name; expected names such as \"index.html\"", j, idx))
			}
		}
		if s.LimitRate < 0 {
			add(c.errAt(key+".limit_rate", "must not be negative"))
		}
		if !On(s.Protocols.H1) && !On(s.Protocols.H2) && !On(s.Protocols.H3) {
			add(c.errAt(key+".protocols", "every protocol is off; enable at least one of h1, h2, h3"))
		}
		t := &s.TLS
		if (t.Cert == "") != (t.Key == "") {
			add(c.errAt(key+".tls", "cert and key go together; set both (PEM files) or neither"))
		}
		for _, f := range []struct{ name, path string }{{"cert", t.Cert}, {"key", t.Key}} {
			if f.path == "" {
				continue
			}
			p := c.resolvePath(key+".tls."+f.name, f.path)
			if _, err := os.Stat(p); err != nil {
				add(c.errAt(key+".tls."+f.name, "cannot read %q: %v; expected a PEM file", p, unwrapPathError(err)))
			}
			if f.name == "cert" {
				t.Cert = p
			} else {
				t.Key = p
			}
		}
		switch t.MinVersion {
		case "", "1.3", "1.2":
		default:
			add(c.errAt(key+".tls.min_version", "%q is not supported; expected \"1.3\" (the default) or \"1.2\"", t.MinVersion))
		}
		switch s.HiddenFiles {
		case "", "serve", "deny":
		default:
			add(c.errAt(key+".hidden_files", "%q is not a policy; expected \"serve\" (the default) or \"deny\" (404 for /.git, /.env and other dotfiles)", s.HiddenFiles))
		}
	}
	if defaults > 1 {
		add(&Error{File: c.src.file, Key: "sites", Msg: "more than one site has default = true; choose one"})
	}
	if defaults > 0 && c.Root != "" {
		add(&Error{File: c.src.file, Key: "sites", Msg: "a site has default = true but the top-level root already makes the default site; remove one"})
	}

	ig := &c.Integrity
	for _, m := range []struct{ key, v string }{{"integrity.mode", ig.Mode}} {
		switch m.v {
		case "", "serve", "require":
		default:
			add(c.errAt(m.key, "%q is not a mode; expected \"serve\" or \"require\"", m.v))
		}
	}
	if ig.Mode == "" {
		ig.Mode = "serve"
	}
	for i := range c.Sites {
		switch m := c.Sites[i].Integrity.Mode; m {
		case "":
			c.Sites[i].Integrity.Mode = ig.Mode
		case "serve", "require":
		default:
			add(c.errAt(fmt.Sprintf("sites[%d].integrity.mode", i), "%q is not a mode; expected \"serve\" or \"require\"", m))
		}
	}
	switch ig.OnMismatch {
	case "", "serve", "refuse":
	default:
		add(c.errAt("integrity.on_mismatch", "%q is not a policy; expected \"serve\" or \"refuse\"", ig.OnMismatch))
	}
	if ig.Manifest == "" {
		ig.Manifest = "B3SUMS"
	} else if ig.Manifest != "off" && (strings.ContainsAny(ig.Manifest, "/\\") || ig.Manifest == "." || ig.Manifest == "..") {
		add(c.errAt("integrity.manifest", "%q is not a file name; expected a name such as \"B3SUMS\" (looked for at each site root) or \"off\"", ig.Manifest))
	}
	if ig.Cache != "" {
		ig.Cache = c.resolvePath("integrity.cache", ig.Cache)
		if st, err := os.Stat(filepath.Dir(ig.Cache)); err != nil || !st.IsDir() {
			add(c.errAt("integrity.cache", "directory of %q does not exist; expected a file in an existing directory", ig.Cache))
		}
	}
	if ig.Workers == 0 {
		ig.Workers = 1
	}
	if ig.Workers < 1 || ig.Workers > 256 {
		add(c.errAt("integrity.workers", "%d is out of range; expected 1 to 256", ig.Workers))
	}

	k := &c.Kernel
	for _, m := range []struct{ key, v string }{{"kernel.ktls", k.KTLS}, {"kernel.bbr", k.BBR}} {
		switch m.v {
		case "", "require", "auto", "off":
		default:
			add(c.errAt(m.key, "%q is not a mode; expected \"require\", \"auto\" or \"off\"", m.v))
		}
	}
	if k.PromoteAfter == nil {
		v := Size(1 << 20)
		k.PromoteAfter = &v
	} else if *k.PromoteAfter < 0 {
		add(c.errAt("kernel.promote_after", "must not be negative"))
	}
	if k.BulkThreshold < 0 {
		add(c.errAt("kernel.bulk_threshold", "must not be negative"))
	} else if k.BulkThreshold == 0 {
		k.BulkThreshold = 1 << 20
	}
	if k.BulkCongestion == "" {
		k.BulkCongestion = "bbr"
	}
	if !validCongestion(k.BulkCongestion) {
		add(c.errAt("kernel.bulk_congestion", "%q is not a congestion control name; expected \"bbr\", \"cubic\" or \"off\"", k.BulkCongestion))
	}
	if c.HasTLS() && k.KTLS == "" {
		k.KTLS = "require"
		if c.selfSigned {
			// --self-signed is for trying the server out: on a kernel
			// without kTLS it serves in userspace (and says so).
			k.KTLS = "auto"
		}
	}
	if k.BBR == "" && k.BulkCongestion == "bbr" {
		k.BBR = "require"
	}

	l := &c.Limits
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 16 << 10
	}
	if l.MaxHeaderBytes < 1<<10 || l.MaxHeaderBytes > 1<<20 {
		add(c.errAt("limits.max_header_bytes", "%v is out of range; expected 1KiB to 1MiB", l.MaxHeaderBytes))
	}
	if l.MaxHeaders == 0 {
		l.MaxHeaders = 100
	}
	if l.MaxHeaders < 1 || l.MaxHeaders > 10000 {
		add(c.errAt("limits.max_headers", "%d is out of range; expected 1 to 10000", l.MaxHeaders))
	}
	if l.MaxURIBytes == 0 {
		l.MaxURIBytes = 8 << 10
	}
	if l.MaxURIBytes < 256 || l.MaxURIBytes > l.MaxHeaderBytes {
		add(c.errAt("limits.max_uri_bytes", "%v is out of range; expected 256B up to max_header_bytes (%v)", l.MaxURIBytes, l.MaxHeaderBytes))
	}
	for _, d := range []struct {
		key string
		v   *Duration
		def Duration
	}{
		{"limits.header_timeout", &l.HeaderTimeout, Duration(30e9)},
		{"limits.body_timeout", &l.BodyTimeout, Duration(30e9)},
		{"limits.idle_timeout", &l.IdleTimeout, Duration(75e9)},
		{"limits.send_timeout", &l.SendTimeout, Duration(60e9)},
	} {
		if *d.v == 0 {
			*d.v = d.def
		} else if *d.v < Duration(1e6) {
			add(c.errAt(d.key, "%d is too short to be meant; write a duration with a unit, such as \"30s\"", int64(*d.v)))
		}
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = 8192
	}
	if l.MaxConnections < 1 || l.MaxConnections > 1<<24 {
		add(c.errAt("limits.max_connections", "%d is out of range; expected 1 to 16777216", l.MaxConnections))
	}

	rs := &c.Runtime.Settings
	if rs.H2TLSWriteBuffer == 0 {
		rs.H2TLSWriteBuffer = 128 << 10
	}
	if rs.H2TLSWriteBuffer < 16<<10 || rs.H2TLSWriteBuffer > 16<<20 {
		add(c.errAt("runtime.settings.h2_tls_write_buffer_bytes", "%v is out of range; expected 16KiB to 16MiB", rs.H2TLSWriteBuffer))
	}
	if rs.H2SendBuffer == 0 {
		rs.H2SendBuffer = 256 << 10
	}
	if rs.H2SendBuffer < 16<<10 || rs.H2SendBuffer > 64<<20 {
		add(c.errAt("runtime.settings.h2_connection_send_buffer_bytes", "%v is out of range; expected 16KiB to 64MiB", rs.H2SendBuffer))
	}
	if rs.H2MaxConcurrentStreams == 0 {
		rs.H2MaxConcurrentStreams = 128
	}
	if rs.H2MaxConcurrentStreams < 1 || rs.H2MaxConcurrentStreams > 1<<16 {
		add(c.errAt("runtime.settings.h2_max_concurrent_streams", "%d is out of range; expected 1 to 65536", rs.H2MaxConcurrentStreams))
	}

	h := &c.H3
	if h.BulkPaceRate < 0 {
		add(c.errAt("h3.bulk_pace_rate", "must not be negative"))
	} else if h.BulkPaceRate > 0 && h.BulkPaceRate < 64<<10 {
		add(c.errAt("h3.bulk_pace_rate", "%v per second is too slow to be meant; expected 64KiB or more (bytes per second), or 0 for unpaced", h.BulkPaceRate))
	}
	if h.MaxStreams == 0 {
		h.MaxStreams = 100
	}
	if h.MaxStreams < 1 || h.MaxStreams > 1<<16 {
		add(c.errAt("h3.max_streams", "%d is out of range; expected 1 to 65536", h.MaxStreams))
	}
	for _, w := range []struct {
		key string
		v   *Size
		def Size
	}{
		{"h3.stream_receive_window", &h.StreamReceiveWindow, 6 << 20},
		{"h3.connection_receive_window", &h.ConnectionReceiveWindow, 15 << 20},
		{"h3.udp_buffer_bytes", &h.UDPBuffer, 7 << 20},
	} {
		if *w.v == 0 {
			*w.v = w.def
		} else if *w.v < 64<<10 || *w.v > 1<<30 {
			add(c.errAt(w.key, "%v is out of range; expected 64KiB to 1GiB", *w.v))
		}
	}

	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return errs
	}
	return nil
}

// HasTLS reports whether the listener speaks TLS: a site has a
// certificate, or serve --self-signed made one.
func (c *Config) HasTLS() bool {
	if c.selfSigned {
		return true
	}
	for i := range c.Sites {
		if c.Sites[i].TLS.Cert != "" {
			return true
		}
	}
	return false
}

// H3Enabled reports whether HTTP/3 is served: the listener speaks TLS and
// some site allows h3 (the top-level root's site allows every protocol).
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

func checkDir(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("cannot use %q: %v", p, unwrapPathError(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("%q is not a directory", p)
	}
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func validDomain(d string) bool {
	if d == "*" {
		return true
	}
	d = strings.TrimPrefix(strings.TrimSuffix(d, "."), "*.")
	if d == "" || len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func validCongestion(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z') {
			return false
		}
	}
	return true
}

// fieldFor walks Config's TOML tags along a key path ("sites[0].tls.cert"
// or a go-toml Key) and returns the field type it ends at.
func fieldFor(parts []string) (reflect.Type, bool) {
	t := reflect.TypeFor[Config]()
	for _, p := range parts {
		if i := strings.IndexByte(p, '['); i >= 0 {
			p = p[:i]
		}
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			if strings.Split(t.Field(i).Tag.Get("toml"), ",")[0] == p {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return t, true
}

// expectedKeys lists the keys valid in the table that holds key.
func expectedKeys(key []string) string {
	if len(key) == 0 {
		return "check the spelling"
	}
	t, ok := fieldFor(key[:len(key)-1])
	if !ok {
		return "check the spelling"
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return "check the spelling"
	}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if n := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]; n != "" && n != "-" {
			names = append(names, n)
		}
	}
	where := "at the top level"
	if len(key) > 1 {
		where = "in [" + strings.Join(key[:len(key)-1], ".") + "]"
	}
	return "expected one of " + strings.Join(names, ", ") + " " + where
}

// expectedType describes in words what the key at path holds.
func expectedType(path string) string {
	t, ok := fieldFor(strings.Split(path, "."))
	if !ok {
		return ""
	}
	switch t {
	case reflect.TypeFor[Size](), reflect.TypeFor[*Size]():
		return "a size such as \"64KiB\" or \"1MiB\""
	case reflect.TypeFor[Duration]():
		return "a duration such as \"30s\""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.String:
		return "a string in quotes"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings such as [\"index.html\"]"
		}
		return "a list of tables ([[" + path + "]])"
	case reflect.Struct:
		return "a table ([" + path + "])"
	}
	return ""
}
