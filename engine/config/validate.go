package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mediaship/engine/internal/httpsyntax"
)

// Validate checks every value, fills in defaults and reports all mistakes.
//
// It goes section by section, each in one function, in this order: a
// later section may read what an earlier one resolved (sites use the
// top-level root; kernel asks HasTLS). The mistakes come back sorted by
// line, in the order found where lines tie.
func (c *Config) Validate() error {
	var errs Errors
	c.validateTop(&errs)
	c.validateSigning(&errs)
	c.validateSites(&errs)
	c.validateProxy(&errs)
	c.validateCache(&errs)
	c.validateACME(&errs)
	c.validateAdmin(&errs)
	c.validateIntegrity(&errs)
	c.validateKernel(&errs)
	c.validateLimits(&errs)
	c.validateRuntime(&errs)
	c.validateH3(&errs)
	c.validateWebTransport(&errs)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return errs
	}
	return nil
}

func (es *Errors) add(e *Error) { *es = append(*es, e) }

// validateTop checks the top-level keys: listen, workers, log_level,
// shutdown_grace, access_log and root, and that there is something to
// serve.
func (c *Config) validateTop(errs *Errors) {
	if c.Listen == "" {
		c.Listen = ":8080"
	}
	if host, port, err := net.SplitHostPort(c.Listen); err != nil {
		errs.add(c.errAt("listen", "%q is not an address; expected host:port such as \"0.0.0.0:8080\" or \":443\"", c.Listen))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs.add(c.errAt("listen", "port %q is not a number from 0 to 65535", port))
	} else if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		errs.add(c.errAt("listen", "host %q is not an IP address; expected an address such as 0.0.0.0, [::] or 127.0.0.1", host))
	}
	if c.Workers < 0 || c.Workers > 1024 {
		errs.add(c.errAt("workers", "%d is out of range; expected 0 (one per CPU) to 1024", c.Workers))
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		errs.add(c.errAt("log_level", "%q is not a level; expected \"debug\", \"info\", \"warn\" or \"error\"", c.LogLevel))
	}
	if c.ShutdownGrace == (Grace{}) {
		c.ShutdownGrace.Duration = Duration(30e9)
	}
	if c.PidFile != "" {
		// Its directory may not exist yet: systemd makes /run/engine
		// (RuntimeDirectory) as the service starts, and serve makes it
		// otherwise.
		c.PidFile = c.resolvePath("pid_file", c.PidFile)
	}
	switch c.AccessLog {
	case "", "off", "stdout", "stderr":
	default:
		c.AccessLog = c.resolvePath("access_log", c.AccessLog)
		if st, err := os.Stat(filepath.Dir(c.AccessLog)); err != nil || !st.IsDir() {
			errs.add(c.errAt("access_log", "directory of %q does not exist; expected \"off\", \"stdout\", \"stderr\" or a file in an existing directory", c.AccessLog))
		}
	}

	if c.Root != "" {
		c.Root = c.resolvePath("root", c.Root)
		if err := checkDir(c.Root); err != nil {
			errs.add(c.errAt("root", "%v; expected the directory to serve", err))
		}
	}
	if c.Root == "" && len(c.Sites) == 0 && !c.ProxyOn() {
		errs.add(&Error{File: c.src.file, Key: "root",
			Msg: "nothing to serve; set root (or --root DIR) or add a [[sites]] table with a domain and a root"})
	}
}

// validateSites checks every [[sites]] table, that no domain appears
// twice, and that at most one site is the default.
func (c *Config) validateSites(errs *Errors) {
	domains := map[string]int{} // lowercase domain -> index of its site
	defaults := 0
	for i := range c.Sites {
		c.validateSite(i, domains, errs)
		if c.Sites[i].Default {
			defaults++
		}
	}
	if defaults > 1 {
		errs.add(&Error{File: c.src.file, Key: "sites", Msg: "more than one site has default = true; choose one"})
	}
	if defaults > 0 && c.Root != "" {
		errs.add(&Error{File: c.src.file, Key: "sites", Msg: "a site has default = true but the top-level root already makes the default site; remove one"})
	}
}

// validateSite checks sites[i] and records its domain in domains. Its
// integrity mode is checked with [integrity], whose mode it inherits.
func (c *Config) validateSite(i int, domains map[string]int, errs *Errors) {
	s := &c.Sites[i]
	key := fmt.Sprintf("sites[%d]", i)
	if s.Domain == "" {
		errs.add(c.errAt(key+".domain", "missing; every [[sites]] table needs a domain such as \"media.example.com\", \"*.example.com\" or \"*\""))
	} else if !validDomain(s.Domain) {
		errs.add(c.errAt(key+".domain", "%q is not a host name; expected a name such as \"media.example.com\", \"*.example.com\" or \"*\"", s.Domain))
	} else {
		d := httpsyntax.NormalizeName(s.Domain)
		if j, dup := domains[d]; dup {
			errs.add(c.errAt(key+".domain", "%q is already the domain of sites[%d]; each domain may appear once", s.Domain, j))
		}
		domains[d] = i
	}
	if s.Root == "" {
		if c.Root == "" {
			errs.add(c.errAt(key+".root", "missing; a site needs a root directory (or set the top-level root)"))
		}
	} else {
		s.Root = c.resolvePath(key+".root", s.Root)
		if err := checkDir(s.Root); err != nil {
			errs.add(c.errAt(key+".root", "%v; expected the directory this site serves", err))
		}
	}
	for j, idx := range s.Index {
		if idx == "" || strings.ContainsAny(idx, "/\\\x00") || idx == "." || idx == ".." {
			errs.add(c.errAt(fmt.Sprintf("%s.index", key), "entry %d (%q) is not a file name; expected names such as \"index.html\"", j, idx))
		}
	}
	if s.LimitRate < 0 {
		errs.add(c.errAt(key+".limit_rate", "must not be negative"))
	}
	if !On(s.Protocols.H1) && !On(s.Protocols.H2) && !On(s.Protocols.H3) {
		errs.add(c.errAt(key+".protocols", "every protocol is off; enable at least one of h1, h2, h3"))
	}
	c.validatePaths(key, s.Paths, errs)
	if strings.ContainsAny(s.HSTS, "\r\n\x00") {
		errs.add(c.errAt(key+".hsts", "the value holds a line break or NUL"))
	}
	c.validateSiteTLS(key, &s.TLS, errs)
	switch s.HiddenFiles {
	case "", "serve", "deny":
	default:
		errs.add(c.errAt(key+".hidden_files", "%q is not a policy; expected \"serve\" (the default) or \"deny\" (404 for /.git, /.env and other dotfiles)", s.HiddenFiles))
	}
}

// validateSiteTLS checks a site's [sites.tls] table; key is the site's
// ("sites[0]"). The PEM files are only checked to exist here: the engine
// loads them.
func (c *Config) validateSiteTLS(key string, t *TLS, errs *Errors) {
	if (t.Cert == "") != (t.Key == "") {
		errs.add(c.errAt(key+".tls", "cert and key go together; set both (PEM files) or neither"))
	}
	for _, f := range []struct{ name, path string }{{"cert", t.Cert}, {"key", t.Key}} {
		if f.path == "" {
			continue
		}
		p := c.resolvePath(key+".tls."+f.name, f.path)
		if _, err := os.Stat(p); err != nil {
			errs.add(c.errAt(key+".tls."+f.name, "cannot read %q: %v; expected a PEM file", p, unwrapPathError(err)))
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
		errs.add(c.errAt(key+".tls.min_version", "%q is not supported; expected \"1.3\" (the default) or \"1.2\"", t.MinVersion))
	}
	c.validateKeyExchanges(key+".tls", t, errs)
}

// validateIntegrity checks [integrity], and each site's integrity mode,
// which defaults to the one in [integrity].
func (c *Config) validateIntegrity(errs *Errors) {
	ig := &c.Integrity
	switch ig.Mode {
	case "", "serve", "require":
	default:
		errs.add(c.errAt("integrity.mode", "%q is not a mode; expected \"serve\" or \"require\"", ig.Mode))
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
			errs.add(c.errAt(fmt.Sprintf("sites[%d].integrity.mode", i), "%q is not a mode; expected \"serve\" or \"require\"", m))
		}
	}
	switch ig.OnMismatch {
	case "", "serve", "refuse":
	default:
		errs.add(c.errAt("integrity.on_mismatch", "%q is not a policy; expected \"serve\" or \"refuse\"", ig.OnMismatch))
	}
	if ig.Manifest == "" {
		ig.Manifest = "B3SUMS"
	} else if ig.Manifest != "off" && (strings.ContainsAny(ig.Manifest, "/\\") || ig.Manifest == "." || ig.Manifest == "..") {
		errs.add(c.errAt("integrity.manifest", "%q is not a file name; expected a name such as \"B3SUMS\" (looked for at each site root) or \"off\"", ig.Manifest))
	}
	switch ig.StateDir {
	case "":
		ig.StateDir = DefaultStateDir()
	case "off":
	default:
		ig.StateDir = c.resolvePath("integrity.state_dir", ig.StateDir)
	}
	switch {
	case ig.Cache == "" && ig.StateDir == "off":
		ig.Cache = "off"
	case ig.Cache == "":
		ig.Cache = filepath.Join(ig.StateDir, "digests")
	case ig.Cache != "off":
		ig.Cache = c.resolvePath("integrity.cache", ig.Cache)
		if st, err := os.Stat(filepath.Dir(ig.Cache)); err != nil || !st.IsDir() {
			errs.add(c.errAt("integrity.cache", "directory of %q does not exist; expected a file in an existing directory", ig.Cache))
		}
	}
	if len(ig.Digests) == 0 {
		ig.Digests = []string{"blake3"}
	}
	hasB3 := false
	for i, d := range ig.Digests {
		switch strings.ToLower(d) {
		case "blake3":
			hasB3 = true
		case "sha-256", "sha256":
			ig.Digests[i] = "sha-256"
			continue
		default:
			errs.add(c.errAt("integrity.digests", "%q is not a digest; expected \"blake3\" or \"sha-256\"", d))
			continue
		}
		ig.Digests[i] = "blake3"
	}
	if !hasB3 {
		errs.add(c.errAt("integrity.digests", "%q leaves out \"blake3\", which ETags, manifests and outboard trees need; expected [\"blake3\"] or [\"blake3\", \"sha-256\"]", ig.Digests))
	}
	if ig.Workers == 0 {
		ig.Workers = 1
	}
	if ig.Workers < 1 || ig.Workers > 256 {
		errs.add(c.errAt("integrity.workers", "%d is out of range; expected 1 to 256", ig.Workers))
	}
}

// DefaultStateDir is where [integrity] keeps its state when state_dir is
// not set: below $STATE_DIRECTORY (set by systemd's StateDirectory=),
// else /var/lib/engine for root, else the user's XDG state directory.
func DefaultStateDir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		// systemd may list several, separated by colons: the first is ours.
		d, _, _ = strings.Cut(d, ":")
		return filepath.Join(d, "integrity")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/engine/integrity"
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "engine", "integrity")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "engine", "integrity")
	}
	return filepath.Join(os.TempDir(), "engine-state", "integrity")
}

// validateKernel checks [kernel]. Kernel TLS defaults to "require" only
// when the listener speaks TLS, so the sites are read first.
func (c *Config) validateKernel(errs *Errors) {
	k := &c.Kernel
	for _, m := range []struct{ key, v string }{{"kernel.ktls", k.KTLS}, {"kernel.bbr", k.BBR}} {
		switch m.v {
		case "", "require", "auto", "off":
		default:
			errs.add(c.errAt(m.key, "%q is not a mode; expected \"require\", \"auto\" or \"off\"", m.v))
		}
	}
	if k.PromoteAfter == nil {
		v := Size(1 << 20)
		k.PromoteAfter = &v
	} else if *k.PromoteAfter < 0 {
		errs.add(c.errAt("kernel.promote_after", "must not be negative"))
	}
	if k.BulkThreshold < 0 {
		errs.add(c.errAt("kernel.bulk_threshold", "must not be negative"))
	} else if k.BulkThreshold == 0 {
		k.BulkThreshold = 1 << 20
	}
	if k.BulkCongestion == "" {
		k.BulkCongestion = "bbr"
	}
	if !validCongestion(k.BulkCongestion) {
		errs.add(c.errAt("kernel.bulk_congestion", "%q is not a congestion control name; expected \"bbr\", \"cubic\" or \"off\"", k.BulkCongestion))
	}
	if c.HasTLS() && k.KTLS == "" {
		k.KTLS = "require"
		if c.selfSigned {
			// --self-signed is for trying the server out: on a kernel
			// without kTLS it serves in userspace (and says so).
			k.KTLS = "auto"
			c.relaxed = append(c.relaxed, `kernel.ktls is "auto" (TLS from userspace where the kernel has no kernel TLS); with a certificate of its own this configuration requires kernel TLS (kernel.ktls = "require"): run "engine preflight" to see whether this kernel has it, or set kernel.ktls = "auto" to serve without it`)
		}
	}
	if k.BBR == "" && k.BulkCongestion == "bbr" {
		k.BBR = "require"
	}
}

// validateLimits checks [limits].
func (c *Config) validateLimits(errs *Errors) {
	l := &c.Limits
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 16 << 10
	}
	if l.MaxHeaderBytes < 1<<10 || l.MaxHeaderBytes > 1<<20 {
		errs.add(c.errAt("limits.max_header_bytes", "%v is out of range; expected 1KiB to 1MiB", l.MaxHeaderBytes))
	}
	if l.MaxHeaders == 0 {
		l.MaxHeaders = 100
	}
	if l.MaxHeaders < 1 || l.MaxHeaders > 10000 {
		errs.add(c.errAt("limits.max_headers", "%d is out of range; expected 1 to 10000", l.MaxHeaders))
	}
	if l.MaxURIBytes == 0 {
		l.MaxURIBytes = 8 << 10
	}
	if l.MaxURIBytes < 256 || l.MaxURIBytes > l.MaxHeaderBytes {
		errs.add(c.errAt("limits.max_uri_bytes", "%v is out of range; expected 256B up to max_header_bytes (%v)", l.MaxURIBytes, l.MaxHeaderBytes))
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
			errs.add(c.errAt(d.key, "%d is too short to be meant; write a duration with a unit, such as \"30s\"", int64(*d.v)))
		}
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = 8192
	}
	if l.MaxConnections < 1 || l.MaxConnections > 1<<24 {
		errs.add(c.errAt("limits.max_connections", "%d is out of range; expected 1 to 16777216", l.MaxConnections))
	}
	if l.MaxConnectionsPerAddress == 0 {
		l.MaxConnectionsPerAddress = min(l.MaxConnections, max(64, l.MaxConnections/8))
	}
	if l.MaxConnectionsPerAddress < 1 || l.MaxConnectionsPerAddress > l.MaxConnections {
		errs.add(c.errAt("limits.max_connections_per_address", "%d is out of range; expected 1 up to max_connections (%d), which turns the limit off", l.MaxConnectionsPerAddress, l.MaxConnections))
	}
	if l.AddressIPv6Prefix == 0 {
		l.AddressIPv6Prefix = 64
	}
	if l.AddressIPv6Prefix < 16 || l.AddressIPv6Prefix > 128 {
		errs.add(c.errAt("limits.address_ipv6_prefix", "%d is out of range; expected a prefix length of 16 to 128 (64 counts each /64 as one client)", l.AddressIPv6Prefix))
	}
	if l.MinSendRate == 0 {
		l.MinSendRate = 4 << 10
	}
	if l.MinSendRate < 1 || l.MinSendRate > 1<<30 {
		errs.add(c.errAt("limits.min_send_rate", "%v is out of range; expected 1B (only stalled responses) to 1GiB, in bytes a second", l.MinSendRate))
	}
	if l.MemoryLimit == 0 {
		l.MemoryLimit = 64<<20 + Size(l.MaxConnections)*320<<10
	}
	if l.MemoryLimit < 32<<20 {
		errs.add(c.errAt("limits.memory_limit", "%v is too small to serve with; expected 32MiB or more (the default is 64MiB plus 320KiB per max_connections)", l.MemoryLimit))
	}
	if l.MinSendRateWindow == 0 {
		l.MinSendRateWindow = Duration(20e9)
	}
	if l.MinSendRateWindow < Duration(1e9) || l.MinSendRateWindow > Duration(600e9) {
		errs.add(c.errAt("limits.min_send_rate_window", "%v is out of range; expected 1s to 10m", l.MinSendRateWindow.D()))
	}
}

// validateRuntime checks [runtime.settings].
func (c *Config) validateRuntime(errs *Errors) {
	rs := &c.Runtime.Settings
	if rs.H2TLSWriteBuffer == 0 {
		rs.H2TLSWriteBuffer = 128 << 10
	}
	if rs.H2TLSWriteBuffer < 16<<10 || rs.H2TLSWriteBuffer > 16<<20 {
		errs.add(c.errAt("runtime.settings.h2_tls_write_buffer_bytes", "%v is out of range; expected 16KiB to 16MiB", rs.H2TLSWriteBuffer))
	}
	if rs.H2SendBuffer == 0 {
		rs.H2SendBuffer = 256 << 10
	}
	if rs.H2SendBuffer < 16<<10 || rs.H2SendBuffer > 64<<20 {
		errs.add(c.errAt("runtime.settings.h2_connection_send_buffer_bytes", "%v is out of range; expected 16KiB to 64MiB", rs.H2SendBuffer))
	}
	if rs.H2MaxConcurrentStreams == 0 {
		rs.H2MaxConcurrentStreams = 128
	}
	if rs.H2MaxConcurrentStreams < 1 || rs.H2MaxConcurrentStreams > 1<<16 {
		errs.add(c.errAt("runtime.settings.h2_max_concurrent_streams", "%d is out of range; expected 1 to 65536", rs.H2MaxConcurrentStreams))
	}
	if rs.ProxyH2TLSMaxSendBuffer == 0 {
		rs.ProxyH2TLSMaxSendBuffer = 128 << 10
	}
	if rs.ProxyH2TLSMaxSendBuffer < 16<<10 || rs.ProxyH2TLSMaxSendBuffer > 64<<20 {
		errs.add(c.errAt("runtime.settings.proxy_h2_tls_max_send_buffer_bytes", "%v is out of range; expected 16KiB to 64MiB", rs.ProxyH2TLSMaxSendBuffer))
	}
	if rs.ProxyH2TLSConnectionSendBuffer == 0 {
		rs.ProxyH2TLSConnectionSendBuffer = 32 << 20
	}
	if rs.ProxyH2TLSConnectionSendBuffer < rs.ProxyH2TLSMaxSendBuffer || rs.ProxyH2TLSConnectionSendBuffer > 1<<30 {
		errs.add(c.errAt("runtime.settings.proxy_h2_tls_connection_send_buffer_bytes", "%v is out of range; expected proxy_h2_tls_max_send_buffer_bytes (%v) to 1GiB", rs.ProxyH2TLSConnectionSendBuffer, rs.ProxyH2TLSMaxSendBuffer))
	}
	if rs.ProxyH2TLSTotalSendBuffer == 0 {
		rs.ProxyH2TLSTotalSendBuffer = max(256<<20, rs.ProxyH2TLSConnectionSendBuffer)
	}
	if rs.ProxyH2TLSTotalSendBuffer < rs.ProxyH2TLSConnectionSendBuffer || rs.ProxyH2TLSTotalSendBuffer > 64<<30 {
		errs.add(c.errAt("runtime.settings.proxy_h2_tls_total_send_buffer_bytes", "%v is out of range; expected proxy_h2_tls_connection_send_buffer_bytes (%v) to 64GiB", rs.ProxyH2TLSTotalSendBuffer, rs.ProxyH2TLSConnectionSendBuffer))
	}
}

// validateH3 checks [h3].
func (c *Config) validateH3(errs *Errors) {
	h := &c.H3
	if h.BulkPaceRate < 0 {
		errs.add(c.errAt("h3.bulk_pace_rate", "must not be negative"))
	} else if h.BulkPaceRate > 0 && h.BulkPaceRate < 64<<10 {
		errs.add(c.errAt("h3.bulk_pace_rate", "%v per second is too slow to be meant; expected 64KiB or more (bytes per second), or 0 for unpaced", h.BulkPaceRate))
	}
	if h.MaxStreams == 0 {
		h.MaxStreams = 100
	}
	if h.MaxStreams < 1 || h.MaxStreams > 1<<16 {
		errs.add(c.errAt("h3.max_streams", "%d is out of range; expected 1 to 65536", h.MaxStreams))
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
			errs.add(c.errAt(w.key, "%v is out of range; expected 64KiB to 1GiB", *w.v))
		}
	}
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
