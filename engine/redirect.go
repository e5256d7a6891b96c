package engine

import (
	"net"
	"strconv"
	"strings"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
)

// The [redirect_http] listener: a plain HTTP/1.1 listener on a reactor
// group of its own (one loop: redirects are small, and a flood of them
// stays off the loops that move files). Every request for a name the TLS
// listener serves gets 308 to the same URL over https://; the CA's HTTP-01
// validations get their key authorization; any other Host gets 421, so
// the listener never redirects to a host the configuration does not name.

// acmeChallengePrefix starts the path of every HTTP-01 validation.
const acmeChallengePrefix = "/.well-known/acme-challenge/"

// challengeAnswer is the outcome of an HTTP-01 lookup in storage, made on
// a worker, for the connection's request.
type challengeAnswer struct {
	host, path string
	body       string
	ok         bool
}

// redirectPort is the port written in Location: https_port, else the TLS
// listener's; "" for 443.
func redirectPort(s *Server) string {
	p := s.cfg.RedirectHTTP.HTTPSPort
	if p == 0 {
		_, port, err := net.SplitHostPort(s.Addr())
		if err != nil {
			return ""
		}
		p, _ = strconv.Atoi(port)
	}
	if p == 443 || p == 0 {
		return ""
	}
	return strconv.Itoa(p)
}

// handleRedirect answers the request h.req (head of n bytes) on the
// redirect listener. It returns false while an HTTP-01 lookup runs on a
// worker; Serve then parses the request again and finds the answer.
func (h *h1Handler) handleRedirect(c *reactor.Conn, st *h1Conn, n int) bool {
	r := &h.req
	resp := &st.files.Resp
	h.lc.hostBuf = normHost(r.Host, h.lc.hostBuf)
	host := string(h.lc.hostBuf)
	isGet := string(r.Method) == "GET" || string(r.Method) == "HEAD"
	switch {
	case r.Path == nil || r.Path[0] != '/':
		files.ErrorResponse(resp, 400)
		st.closeAfter = true
	case isGet && h.srv.acme != nil && strings.HasPrefix(string(r.Path), acmeChallengePrefix) && h.srv.acme.Manages(host):
		body, ok := h.srv.acme.HTTPChallenge(host, string(r.Path))
		if !ok {
			a := st.challenge
			if a == nil || a.host != host || a.path != string(r.Path) {
				// Not started here: another engine sharing the storage
				// may have started it. Storage is read on a worker.
				a = &challengeAnswer{host: host, path: string(r.Path)}
				st.challenge = a
				m := h.srv.acme
				c.Go(func() { a.body, a.ok = m.HTTPChallengeStored(a.host, a.path) })
				return false
			}
			st.challenge = nil
			body, ok = a.body, a.ok
		}
		if !ok {
			files.ErrorResponse(resp, 404)
			break
		}
		h.srv.stats.ACMEChallenges.Add(1)
		b := []byte(body)
		*resp = files.Response{Status: 200, ContentType: "text/plain", ContentLength: int64(len(b)),
			Parts: []files.Part{{Mem: b, Len: int64(len(b))}}}
		st.closeAfter = true
	case !h.srv.servesName(host):
		h.lc.note("redirect_http: Host names no configured site; 421", "host", host, "peer", c.Peer())
		files.ErrorResponse(resp, 421)
	default:
		loc := append(h.locBuf[:0], "https://"...)
		if strings.IndexByte(host, ':') >= 0 && host[0] != '[' {
			loc = append(append(append(loc, '['), host...), ']') // an IPv6 literal
		} else {
			loc = append(loc, host...)
		}
		if h.redirectPort != "" {
			loc = append(append(loc, ':'), h.redirectPort...)
		}
		loc = appendURIBytes(loc, r.Path)
		if r.Query != nil {
			loc = appendURIBytes(append(loc, '?'), r.Query)
		}
		h.locBuf = loc
		files.ErrorResponse(resp, 308)
		resp.Location = loc
		h.srv.stats.Redirects.Add(1)
	}
	if string(r.Method) == "HEAD" {
		resp.NoBody = true
	}
	h.answer(c, st, n, nil)
	return true
}

// appendURIBytes appends p, percent-encoding each byte a URI may not hold
// as it is (RFC 3986: anything but unreserved, reserved and '%'): '"',
// '<', '>', backslash and the like, which the request line lets through.
func appendURIBytes(dst, p []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, c := range p {
		if c > ' ' && c < 0x7f && !strings.ContainsRune("\"<>\\^`{|}", rune(c)) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}
