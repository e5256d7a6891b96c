package engine

import (
	"bytes"
	"log/slog"
	"net/netip"
	"time"

	"github.com/mediaship/engine/engine/proxy"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/reframe"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/internal/loglimit"
)

// One decision per request. Every driver (HTTP/1.1, HTTP/2, HTTP/3) hands
// decide what it knows of a request, and decide says where it goes: a
// proxy route, a site's files, or a status the engine answers itself,
// with its reason. Drivers keep only their own threading; none matches a
// host, judges a name against its connection or orders the checks.
//
// The order, the same for every protocol:
//
//  1. a request the driver found malformed (HTTP/3: quic-go does not check
//     the authority or the target's syntax) is 400;
//  2. the host it is routed by: on TLS its Host (or :authority), else the
//     name its handshake was for (tlsHost); on plain HTTP its Host;
//  3. an extended CONNECT on the WebTransport diagnostics path (HTTP/3):
//     421 as for a site (step 4), else the endpoint judges the session;
//     any other request for that path on TLS, with the page on: 421 as
//     for a site, 405 for a method other than GET and HEAD, else the
//     diagnostics page;
//  4. a proxy route for that host and path, when its domain names the
//     host at least as specifically as any site's does (exact, then the
//     longest wildcard, then "*" or the default: routing.Rank), as the
//     certificate table chooses the host's facts: 421 when the proxy does
//     not speak the protocol or the connection's TLS facts are not the
//     host's, 400 for a path the upstream could read otherwise; else
//     proxied;
//  5. the site for that host: 421 when it does not speak the protocol or
//     the connection's TLS facts are not the host's; then the policy of
//     the longest [[sites.paths]] prefix of its path (gate: address
//     rules, a CORS preflight answered 204, auth); then 405 for a method
//     other than GET and HEAD, 400 for a target that is no path; else
//     its files answer. A proxied request passes its route's policy the
//     same way, after the route's own checks.

// reqFacts is what the decision needs of a request, whatever its protocol.
type reqFacts struct {
	proto     uint8  // protoH1, protoH2, protoH3
	host      []byte // Host or :authority as sent; nil when none
	method    []byte
	path      []byte    // the target's path, without its query
	malformed bool      // the driver found the authority or target malformed
	query     []byte    // the target's query, without "?"; nil when none
	now       time.Time // the loop's clock (zero: time.Now is read when needed)
	peer      netip.Addr
	hdr       policy.Headers
	// The connection's TLS facts; tls false on a plain connection.
	tls     bool
	sni     string
	version uint16
}

// decision is where a request goes. With route set, status 0 proxies it
// and any other refuses it; otherwise site is set, and status 0 has its
// files answer.
type decision struct {
	route  *routing.Route
	site   *site
	status int
	reason string // why status, for the log
	// webTransport: an extended CONNECT on the diagnostics path, to the
	// WebTransport endpoint under site's name.
	webTransport bool
	// page: a GET or HEAD of the diagnostics path, answered with the
	// diagnostics page (diagPage) for pageHost, the host it was routed
	// by; pageAutorun: the page may start its tests from its query (the
	// browser says no other site led to it).
	page        bool
	pageHost    string
	pageAutorun bool
	// pr is the request's policy (its path's, or its route's) and what
	// the response's fields need of it; refused is the policy's reason
	// when status is its refusal (and detail why, for the log).
	// filePath is the file to serve instead of the request's path (an
	// edge cache hit: the object's, on site); cacheKey, a cached
	// route's miss: the key its response is stored under.
	filePath  []byte
	cacheKey  string
	cacheMiss string  // a miss's Cache-Status
	edgeQ     edgeReq // a miss's request for the origin, when it reads a fill
	edgePass  bool    // the cache's client relays the request (an S3 origin's)
	edgeStale bool    // a hit served stale while it is revalidated
	edgeETag  string  // a hit's origin's strong ETag (its misses' clients have it)
	pr        policy.Resp
	refused   string
	detail    error
	// location is a refusal's Location: the login page a forward auth
	// endpoint redirected to.
	location string
	// slow, when set, must run on a worker before the request is
	// decided again: a password hash to check.
	slow func()
}

// Reasons a request is refused by the decision.
const (
	reasonMalformed   = "malformed authority or target"
	reasonMisdirected = "the connection's TLS facts are not the host's, or the host is not served over this protocol"
	reasonProxyPath   = "a path the upstream could read as another"
	reasonMethod      = "method not allowed"
	reasonNoPrefix    = "no route of the host's domain takes the path"
	reasonTarget      = "the target is not a path"
)

// decide routes and judges request f. buf is scratch for the normalized
// host; it is returned, holding the host the request was routed by.
func (s *Server) decide(f *reqFacts, buf []byte) (decision, []byte) {
	var d decision
	switch {
	case f.tls:
		buf = tlsHost(f.host, f.sni, buf)
	case s.proxy != nil || len(s.sites.all) > 1 || s.sites.normalize:
		buf = normHost(f.host, buf)
	default:
		buf = buf[:0] // one site answers every name
	}
	if f.malformed {
		d.site, d.status, d.reason = s.sites.byName(buf), 400, reasonMalformed
		return d, buf
	}
	misdirected := f.tls && s.misdirected(f.sni, f.version, buf)
	if s.wt != nil && f.proto == protoH3 && string(f.method) == "CONNECT" && string(f.path) == s.cfg.WebTransport.Path {
		st := s.sites.byName(buf)
		d.site, d.webTransport = st, true
		if !st.h3 || misdirected {
			d.status, d.reason = 421, reasonMisdirected
		}
		return d, buf
	}
	if s.wtPage != nil && f.tls && string(f.path) == s.cfg.WebTransport.Path {
		st := s.sites.byName(buf)
		d.site, d.page, d.pageHost = st, true, string(buf)
		// Sec-Fetch-Site (Fetch Metadata), which every browser with
		// WebTransport sends: "none" when the user opened the page
		// (typed, bookmarked, a script driving the browser),
		// "same-origin" from the page itself. From another site, ?run=1
		// would spend up to max_bytes_per_session per visitor on
		// whoever linked there; the page then waits for its Run button.
		if f.hdr != nil {
			sfs := string(f.hdr.Get("sec-fetch-site"))
			d.pageAutorun = sfs == "none" || sfs == "same-origin"
		}
		switch m := string(f.method); {
		case !st.h3 || misdirected:
			d.status, d.reason = 421, reasonMisdirected
		case m != "GET" && m != "HEAD":
			d.status, d.reason = 405, reasonMethod
		}
		return d, buf
	}
	st, rank := s.sites.match(buf)
	if px := s.proxy; px != nil && len(f.path) > 0 && f.path[0] == '/' {
		rt, r := px.Match(buf, routePath(f.path))
		if rt == nil && r > rank {
			// The name is a route domain's, more specifically than any
			// site's: a path none of its prefixes takes is 404, never
			// another site's files under the route's TLS facts (nginx:
			// no location of the server block matched).
			d.route, d.status, d.reason = px.Of(buf), 404, reasonNoPrefix
			if misdirected {
				d.status, d.reason = 421, reasonMisdirected
			}
			return d, buf
		}
		if rt != nil && r >= rank {
			d.route = rt
			switch m := string(f.method); {
			case !proxySpeaks(px, f.proto) || misdirected:
				d.status, d.reason = 421, reasonMisdirected
			case m == "CONNECT" || m == "TRACE":
				// A tunnel or an echo of the request's fields (cookies
				// included) is nothing a reverse proxy passes on; nginx
				// refuses both too.
				d.status, d.reason = 405, reasonMethod
			case reframe.UnsafePath(f.path):
				d.status, d.reason = 400, reasonProxyPath
			default:
				s.gate(f, &d, rt.Policy, routePath(f.path))
				if d.status == 0 && d.slow == nil && rt.Cfg.Cache && s.sites.edge != nil {
					s.edgeLookup(f, &d, buf)
				}
			}
			return d, buf
		}
	}
	d.site = st
	if !st.speaks(f.proto, f.tls) || misdirected {
		d.status, d.reason = 421, reasonMisdirected
		return d, buf
	}
	if len(f.path) > 0 && f.path[0] == '/' {
		clean, ok := cleanPath(f.path)
		if !ok && !st.policy.Empty() {
			// A path the site would refuse is refused before a prefix
			// is matched: no spelling of it may pass one prefix's
			// policy and name another's file.
			d.status, d.reason = 400, reasonTarget
			return d, buf
		}
		s.gate(f, &d, st.policy.Match(clean), clean)
		if d.status != 0 || d.slow != nil {
			return d, buf
		}
	}
	switch m := string(f.method); {
	case m != "GET" && m != "HEAD":
		d.status, d.reason = 405, reasonMethod
	case len(f.path) == 0 || f.path[0] != '/':
		d.status, d.reason = 400, reasonTarget
	}
	return d, buf
}

// servedPath is the path whose file answers: the edge cache object's on
// a hit, else the request's.
func (d *decision) servedPath(path []byte) []byte {
	if d != nil && d.filePath != nil {
		return d.filePath
	}
	return path
}

// alsoETag is the origin's strong entity-tag of an edge cache hit's
// object, which conditional requests may name as well as the engine's.
func (d *decision) alsoETag() string {
	if d == nil {
		return ""
	}
	return d.edgeETag
}

// policyResp is what the response's fields need of d's policy; nil
// without a decision, or without a policy or fields of its own (the
// diagnostics page's).
func (d *decision) policyResp() *policy.Resp {
	if d == nil || d.pr.Path == nil && d.pr.Stored == nil {
		return nil
	}
	return &d.pr
}

// proxiedName is the file name a proxied response's Content-Disposition
// needs, copied (the request's bytes go before the response comes); nil
// when the route names no pattern.
func proxiedName(pr *policy.Resp) []byte {
	if pr.Path == nil || !pr.Path.HasDisposition() || pr.Name == nil {
		return nil
	}
	return bytes.Clone(pr.Name)
}

// refusal fills resp with the answer to a request d refused (or to a
// preflight, 204).
func refusal(resp *files.Response, d *decision) {
	if d.status == 204 {
		*resp = files.Response{Status: 204, NoBody: true}
		return
	}
	files.ErrorResponse(resp, d.status)
	resp.Allow = d.status == 405
	if d.location != "" {
		resp.Location = []byte(d.location)
	}
	if d.status == 429 {
		resp.RetryAfter = 1
	}
}

// gate judges request f against policy p (its path's or route's); clean
// is its path as the site reads it.
func (s *Server) gate(f *reqFacts, d *decision, p *policy.Path, clean []byte) {
	d.pr = policy.Resp{Path: p, TLS: f.tls, Name: policy.FileName(clean)}
	if !p.Checks() {
		return // no rules, no CORS: the response's fields only
	}
	r := policy.Request{Method: f.method, Clean: clean, Query: f.query,
		Client: clientAddr(f, s.cfg.ReverseProxy.Trusted), Header: f.hdr, Now: f.now, Host: f.host, TLS: f.tls}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if p.Auth == policy.AuthForward {
		r.Target = f.path
		if f.query != nil {
			r.Target = append(append(append(make([]byte, 0, len(f.path)+1+len(f.query)), f.path...), '?'), f.query...)
		}
	}
	v := s.secrets.Check(p, &r)
	d.pr.Origin, d.pr.Preflight, d.pr.Challenge = v.Origin, v.Preflight, v.Challenge
	d.location = v.Location
	d.slow = v.Slow
	if v.Status == 0 {
		d.pr.SigQuery = v.SigQuery
		return
	}
	d.status, d.reason = v.Status, "policy"
	if v.Reason != "" {
		d.refused, d.detail = v.Reason, v.Detail
		d.reason = "policy: " + v.Reason
		idx := s.siteProxy()
		if d.site != nil {
			idx = d.site.idx
		}
		s.refusals[idx*len(policy.Reasons)+policy.ReasonIndex(v.Reason)].Add(1)
	}
}

// clientAddr is the address a request's policy judges: the peer's, or,
// when the peer is a trusted proxy, the last address of X-Forwarded-For
// that is not one (the first any trusted proxy was told of). The field's
// lines are one list, in order (RFC 9110 §5.3): a proxy that adds a line
// of its own instead of extending the client's is read right. Forwarded
// is not read: the proxies in front of the engine write X-Forwarded-For.
func clientAddr(f *reqFacts, trusted []netip.Prefix) netip.Addr {
	a := f.peer.Unmap()
	if len(trusted) == 0 || !inPrefixes(a, trusted) || f.hdr == nil {
		return a
	}
	var buf [4][]byte
	lines := f.hdr.Values("x-forwarded-for", buf[:0])
	for l := len(lines) - 1; l >= 0; l-- {
		xff := lines[l]
		for {
			i := bytes.LastIndexByte(xff, ',')
			hop := bytes.TrimSpace(xff[i+1:])
			if len(hop) > 0 {
				h, err := netip.ParseAddr(string(hop))
				if err != nil {
					// Unreadable where a trusted proxy wrote: no address,
					// which address rules refuse.
					return netip.Addr{}
				}
				a = h.Unmap()
				if !inPrefixes(a, trusted) {
					return a
				}
			}
			if i < 0 {
				break
			}
			xff = xff[:i]
		}
	}
	return a
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// routePath is the path routes are matched by: the path as a site reads
// it (percent-decoded once, "." segments and repeated slashes dropped:
// files.CleanPath), so that "/ap%69/x" and "//api/x" are the "/api/"
// route's, as they would be the site's file /api/x; the upstream is sent
// the path as the client wrote it. A path CleanPath refuses is matched as
// sent (its site would refuse it, and UnsafePath refuses most).
func routePath(p []byte) []byte {
	clean, _ := cleanPath(p)
	return clean
}

// cleanPath is the path as a site reads it (routePath's, and what a
// site's policy matches), and false when CleanPath refuses p (the
// site's files would), which is then returned as sent.
func cleanPath(p []byte) ([]byte, bool) {
	if plainPath(p) {
		return p, true
	}
	rel, dirSlash, err := files.CleanPath(p, nil)
	if err != nil {
		return p, false
	}
	out := append(make([]byte, 0, len(rel)+2), '/')
	out = append(out, rel...)
	if len(rel) > 0 && (dirSlash || reframe.UnsafePath(p)) {
		// A path that ends in a dot segment or an encoded separator
		// ("/api/.", "/api%2f") names the directory: the route's, to be
		// refused there (400), not the site's to redirect.
		out = append(out, '/')
	}
	return out, true
}

// plainPath reports whether p is clean as sent: no escape, no "//", no
// dot segment (no "/." at all). One pass: this runs for every request.
func plainPath(p []byte) bool {
	for i, c := range p {
		if c == '%' || c == '/' && i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
			return false
		}
	}
	return true
}

// speaks reports whether the site answers protocol proto; plain HTTP/2
// is h2c (prior knowledge), which a site allows apart.
func (s *site) speaks(proto uint8, tls bool) bool {
	switch proto {
	case protoH1:
		return s.h1
	case protoH2:
		return s.h2 && (tls || s.h2c)
	}
	return s.h3
}

// speaks reports whether the proxy answers protocol proto
// ([reverse_proxy.protocols]).
func proxySpeaks(t *proxy.Table, proto uint8) bool {
	switch proto {
	case protoH1:
		return t.H1
	case protoH2:
		return t.H2
	}
	return t.H3
}

// outcome counts a response the engine answered itself or from files,
// for every protocol, and logs what an operator must see: a refusal of a
// request for a route, and a path refused for a reason, through the rate
// limit; a server error as a warning. A parse error's 5xx (path nil) is
// the client's, not a server error. Proxied responses are counted as
// their exchange ends.
func (s *Server) outcome(log *slog.Logger, lim *loglimit.Limiter, d *decision, status int, err error, path []byte, peer any) {
	switch {
	case d != nil && d.refused != "":
		// A policy's refusal: why, for the operator (the client was told
		// only the status); never a credential or a signature.
		lim.Note("policy refused", "status", status, "reason", d.refused, "detail", d.detail, "path", string(path), "peer", peer)
	case d != nil && d.route != nil && d.status != 0:
		lim.Note("proxy: request refused", "status", status, "route", d.route.Key, "reason", d.reason, "path", string(path), "peer", peer)
	case status == 503 && err == nil && path != nil:
		// Not ready (a file not hashed yet under integrity "require", a
		// tree not written yet): any client can ask again and again, so
		// the log is rate-limited.
		s.stats.ServerErrors.Add(1)
		lim.Note("not ready (503)", "path", string(path), "peer", peer)
	case status >= 500 && path != nil:
		s.stats.ServerErrors.Add(1)
		log.Warn("server error", "status", status, "path", string(path), "peer", peer, "err", err)
	case status == 404:
		s.stats.NotFound.Add(1)
	case (status == 400 || status == 403) && err != nil:
		lim.Note("refused path", "status", status, "path", string(path), "peer", peer, "reason", err)
	}
	if d != nil && d.filePath != nil {
		s.stats.EdgeHits.Add(1) // here, once per response: decide may run twice for one request
		if d.edgeStale {
			s.stats.EdgeStale.Add(1)
		}
	}
	s.stats.Requests.Add(1)
}
