package config

import (
	"net/url"
	"strings"
	"time"
)

// WebTransport is [webtransport]: a bounded diagnostics endpoint on the
// HTTP/3 listener (echo, source, sink and datagram sessions), off by
// default.
type WebTransport struct {
	// Enabled serves WebTransport sessions at Path. Zero (false): no
	// WebTransport, and the HTTP/3 SETTINGS do not offer it.
	Enabled bool `toml:"enabled"`
	// Path is the CONNECT request's path. Zero means
	// "/.well-known/engine/diagnostics".
	Path string `toml:"path"`
	// Page serves the diagnostics page (package wtpage) to a GET of
	// Path, over every protocol of the TLS sites. Zero (nil) means true.
	Page *bool `toml:"page"`
	// AllowedOrigins lists the Origin values (scheme://host[:port]) whose
	// sessions are accepted; "*" accepts any. Others get 403.
	AllowedOrigins []string `toml:"allowed_origins"`
	// MaxSessions bounds the sessions open at once, over all
	// connections. Zero means 64.
	MaxSessions int `toml:"max_sessions"`
	// MaxSessionsPerAddress bounds the sessions of one client address
	// (IPv6 by /64). Zero means a quarter of max_sessions, at least 4
	// (all of them when max_sessions is smaller).
	MaxSessionsPerAddress int `toml:"max_sessions_per_address"`
	// MaxStreamsPerSession bounds a session's streams. Zero means 16.
	MaxStreamsPerSession int `toml:"max_streams_per_session"`
	// MaxDatagramBytes bounds a datagram's payload. Zero means 1200.
	MaxDatagramBytes int `toml:"max_datagram_bytes"`
	// MaxBytesPerSession bounds what one session moves, both ways. Zero
	// means 10GiB.
	MaxBytesPerSession Size `toml:"max_bytes_per_session"`
	// IdleTimeout closes a session that moves nothing for this long.
	// Zero means 30s.
	IdleTimeout Duration `toml:"idle_timeout"`
}

// DefaultWebTransportPath is where sessions are served unless path says.
const DefaultWebTransportPath = "/.well-known/engine/diagnostics"

// validateWebTransport checks [webtransport] and fills in its defaults.
func (c *Config) validateWebTransport(errs *Errors) {
	w := &c.WebTransport
	if w.Path == "" {
		w.Path = DefaultWebTransportPath
	}
	if !strings.HasPrefix(w.Path, "/") || strings.ContainsAny(w.Path, "?# \t") {
		errs.add(c.errAt("webtransport.path", "%q is not a path; expected one such as %q (no query)", w.Path, DefaultWebTransportPath))
	}
	for i, o := range w.AllowedOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			errs.add(c.errAt("webtransport.allowed_origins", "entry %d: %q is not an origin; expected scheme://host[:port] such as \"https://media.example.com\", or \"*\" for any", i, o))
		}
	}
	for _, n := range []struct {
		key      string
		v        *int
		def, max int
		min      int
	}{
		{"webtransport.max_sessions", &w.MaxSessions, 64, 4096, 1},
		{"webtransport.max_streams_per_session", &w.MaxStreamsPerSession, 16, 1024, 1},
		{"webtransport.max_datagram_bytes", &w.MaxDatagramBytes, 1200, 1200, 16},
	} {
		if *n.v == 0 {
			*n.v = n.def
		} else if *n.v < n.min || *n.v > n.max {
			errs.add(c.errAt(n.key, "%d is out of range; expected %d to %d", *n.v, n.min, n.max))
		}
	}
	switch {
	case w.MaxSessionsPerAddress == 0:
		w.MaxSessionsPerAddress = max(min(w.MaxSessions, 4), w.MaxSessions/4) // wt.DefaultPerAddress
	case w.MaxSessionsPerAddress < 1 || w.MaxSessionsPerAddress > w.MaxSessions:
		errs.add(c.errAt("webtransport.max_sessions_per_address", "%d is out of range; expected 1 to max_sessions (%d)", w.MaxSessionsPerAddress, w.MaxSessions))
	}
	switch {
	case w.MaxBytesPerSession == 0:
		w.MaxBytesPerSession = 10 << 30
	case w.MaxBytesPerSession < 1<<20 || w.MaxBytesPerSession > 1<<40:
		errs.add(c.errAt("webtransport.max_bytes_per_session", "%d bytes is out of range; expected 1MiB to 1TiB", int64(w.MaxBytesPerSession)))
	}
	switch {
	case w.IdleTimeout == 0:
		w.IdleTimeout = Duration(30 * time.Second)
	case w.IdleTimeout.D() < time.Second || w.IdleTimeout.D() > 10*time.Minute:
		errs.add(c.errAt("webtransport.idle_timeout", "%v is out of range; expected 1s to 10m", w.IdleTimeout.D()))
	}
	switch {
	case w.Enabled && !c.H3Enabled():
		errs.add(c.errAt("webtransport.enabled", "WebTransport runs over HTTP/3, which this configuration does not serve; give a site a certificate (HTTP/3 is on for TLS sites unless [sites.protocols] h3 = false)"))
	}
}
