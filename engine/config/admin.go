package config

import (
	"net"
	"strconv"
)

// Admin is [admin]: a plain HTTP listener for operators, off by default,
// serving /metrics (Prometheus), /healthz and, with PProf, /debug/pprof/.
type Admin struct {
	// Listen is the TCP address, such as "127.0.0.1:9100". Empty: no
	// admin listener.
	Listen string `toml:"listen"`
	// AllowRemote permits a Listen address that is not loopback. Zero
	// (false) refuses one: metrics and profiles name files, clients and
	// timings nobody outside the host should read.
	AllowRemote bool `toml:"allow_remote"`
	// PProf serves Go's profiler under /debug/pprof/. Zero (false) does
	// not.
	PProf bool `toml:"pprof"`
}

// The access log formats.
const (
	LogCombined = "combined" // nginx's combined format
	LogJSON     = "json"     // one JSON object a line
)

// validateAdmin checks [admin] and the access log's format and buffer.
func (c *Config) validateAdmin(errs *Errors) {
	switch c.AccessLogFormat {
	case "":
		c.AccessLogFormat = LogCombined
	case LogCombined, LogJSON:
	default:
		errs.add(c.errAt("access_log_format", "%q is not a format; expected \"combined\" (nginx's) or \"json\"", c.AccessLogFormat))
	}
	switch {
	case c.AccessLogBuffer == 0:
		c.AccessLogBuffer = 1 << 20
	case c.AccessLogBuffer < 4<<10 || c.AccessLogBuffer > 1<<30:
		errs.add(c.errAt("access_log_buffer", "%d bytes is out of range; expected 4KiB to 1GiB", uint64(c.AccessLogBuffer)))
	}

	a := &c.Admin
	_, written := c.src.lines["admin"]
	if a.Listen == "" {
		if written && (a.AllowRemote || a.PProf) {
			errs.add(c.errAt("admin.listen", "missing; expected the address to serve /metrics on, such as \"127.0.0.1:9100\""))
		}
		return
	}
	host, port, err := net.SplitHostPort(a.Listen)
	p, perr := strconv.Atoi(port)
	switch {
	case err != nil:
		errs.add(c.errAt("admin.listen", "%q is not an address; expected host:port such as \"127.0.0.1:9100\"", a.Listen))
		return
	case perr != nil || p < 0 || p > 65535:
		errs.add(c.errAt("admin.listen", "port %q is not a number from 0 to 65535", port))
		return
	case p != 0 && (samePort(a.Listen, c.Listen) || c.RedirectHTTP.Listen != "" && samePort(a.Listen, c.RedirectHTTP.Listen)):
		errs.add(c.errAt("admin.listen", "%q is the port of another listener; the admin listener needs a port of its own, such as 127.0.0.1:9100", a.Listen))
		return
	}
	if host == "localhost" {
		return
	}
	ip := net.ParseIP(host)
	if host == "" {
		ip = net.IPv6unspecified // every address
	}
	switch {
	case ip == nil:
		errs.add(c.errAt("admin.listen", "host %q is not an IP address; expected a loopback address such as 127.0.0.1 or [::1]", host))
	case !ip.IsLoopback() && !a.AllowRemote:
		errs.add(c.errAt("admin.listen", "%q is reachable from other hosts, and /metrics and /debug/pprof/ are for this host's operators; listen on 127.0.0.1 or [::1], or set allow_remote = true in [admin] (and firewall it)", a.Listen))
	}
}
