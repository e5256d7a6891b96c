package accesslog

import (
	"crypto/tls"
	"github.com/mediaship/engine/engine/policy"
	"net/netip"
	"strconv"
	"time"
)

// The protocols a Record is of.
const (
	H1 uint8 = iota
	H2
	H3
)

// Counter counts a finished response: its site (index), protocol,
// status, time to the response head and to the end.
type Counter interface {
	Count(site, proto, status int, ttfb, dur time.Duration)
}

// Active reports whether a request is under way: begun, not finished.
func (r *Record) Active() bool { return !r.at.IsZero() }

// Status is the response's status; 0 before the head was sent.
func (r *Record) Status() int { return r.status }

// SetMinor sets an HTTP/1.x request's minor version.
func (r *Record) SetMinor(m uint8) { r.minor = m }

// At is when the request's head was parsed.
func (r *Record) At() time.Time { return r.at }

// Record follows one request from its parsed head to the end of its
// response: what the metrics and the access log learn of it. A driver
// begins it, marks the response head, and finishes it once.
type Record struct {
	at     time.Time     // the request head was parsed; zero: nothing under way
	ttfb   time.Duration // from at to the response head queued
	status int
	proto  uint8
	minor  uint8 // HTTP/1.x
	site   int   // the metrics' site index
	name   string
	digest bool   // Repr-Digest sent
	tlsVer uint16 // 0: plain
	client netip.Addr
	// The upstream that answered a proxied request; zero otherwise.
	upAddr   netip.AddrPort
	upStatus int
	upTime   time.Duration

	// Copied from the request when the access log is on: the request's
	// bytes are gone by the time the line is written.
	buf                            []byte
	method, target, referer, agent span
}

// span is a field's place in Record.buf; ok is false for a header
// the request did not have.
type span struct {
	off, n int32
	ok     bool
}

func (r *Record) field(s span) []byte { return r.buf[s.off : s.off+s.n] }

func (r *Record) copy(v []byte, ok bool) span {
	s := span{off: int32(len(r.buf)), n: int32(len(v)), ok: ok}
	r.buf = append(r.buf, v...)
	return s
}

// Begin starts the record of a request; method and target may be nil
// for a request that could not be parsed. withLog copies what the access
// log needs. A zero at means now.
func (r *Record) Begin(at time.Time, proto uint8, client netip.Addr, tlsVer uint16, site int, withLog bool, method, target []byte) {
	if at.IsZero() {
		at = time.Now()
	}
	r.at, r.proto, r.client, r.tlsVer = at, proto, client, tlsVer
	r.ttfb, r.status, r.digest, r.minor = 0, 0, false, 1
	r.site, r.name = site, "-"
	r.upAddr, r.upStatus, r.upTime = netip.AddrPort{}, 0, 0
	r.buf = r.buf[:0]
	r.method, r.target, r.referer, r.agent = span{}, span{}, span{}, span{}
	if withLog && method != nil {
		r.method = r.copy(method, true)
		r.target = r.copy(policy.Redact(target), true) // a signed URL in a log is one anyone reading it can use
	}
}

// Headers copies the request's Referer and User-Agent for the log.
func (r *Record) Headers(referer []byte, hasReferer bool, agent []byte, hasAgent bool) {
	r.referer = r.copy(policy.Redact(referer), hasReferer)
	r.agent = r.copy(agent, hasAgent)
}

// SetSite names the site (or proxy route) that answers: its metrics
// index and its domain.
func (r *Record) SetSite(site int, name string) { r.site, r.name = site, name }

// SetUpstream notes the upstream that answered a proxied request: its
// address, its status and how long its response head took; or, for a
// request the engine answered with 502 or 504, the upstream it last
// tried, that status, and a negative headerTime (logged as null).
func (r *Record) SetUpstream(addr netip.AddrPort, status int, headerTime time.Duration) {
	r.upAddr, r.upStatus, r.upTime = addr, status, headerTime
}

// Respond marks the response head queued.
func (r *Record) Respond(status int, digest bool) {
	r.status, r.digest = status, digest
	r.ttfb = time.Since(r.at)
}

// Finish counts the response in m and appends its access log line to
// out (when a is on): sent is the body bytes sent, ktls whether kernel
// TLS carried them. It returns out.
func (r *Record) Finish(m Counter, a *Log, clk *Clock, out []byte, sent int64, ktls bool) []byte {
	if r.at.IsZero() {
		return out
	}
	dur := time.Since(r.at)
	ttfb := r.ttfb
	if r.status == 0 {
		// Ended before a head was sent: the client went away (nginx's
		// 499, "client closed request").
		r.status, ttfb = 499, dur
	}
	m.Count(r.site, int(r.proto), r.status, ttfb, dur)
	if a != nil {
		clk.Set(r.at)
		if a.json {
			out = r.appendJSON(out, clk, sent, dur, ktls)
		} else {
			out = r.appendCombined(out, clk, sent)
		}
	}
	r.at = time.Time{}
	return out
}

// Clock formats the log's timestamps down to the second once a second,
// as nginx does; each goroutine writing lines has its own.
type Clock struct {
	sec   int64
	local []byte // nginx's $time_local: 01/Dec/2026:22:14:06 +0000
	utc   []byte // 2026-12-01T22:14:06 (UTC)
}

func (c *Clock) Set(t time.Time) {
	if s := t.Unix(); s != c.sec || c.local == nil {
		c.sec = s
		c.local = appendLogTime(c.local[:0], t)
		c.utc = t.UTC().AppendFormat(c.utc[:0], "2006-01-02T15:04:05")
	}
}

// appendSeconds appends d in seconds with six decimals.
func appendSeconds(b []byte, d time.Duration) []byte {
	us := max(int64(d/time.Microsecond), 0)
	b = strconv.AppendInt(b, us/1e6, 10)
	b = append(b, '.')
	return appendDigits(b, us%1e6, 6)
}

// appendDigits appends v (non-negative) as exactly n decimal digits.
func appendDigits(b []byte, v int64, n int) []byte {
	var d [20]byte
	for i := n - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:n]...)
}

var (
	space      = []byte{' '}
	dash       = []byte{'-'}
	protoBytes = [...][]byte{[]byte("HTTP/1.0"), []byte("HTTP/1.1"), []byte("HTTP/2.0"), []byte("HTTP/3.0")}
)

func (r *Record) protoIndex() int {
	switch {
	case r.proto == H2:
		return 2
	case r.proto == H3:
		return 3
	case r.minor == 0:
		return 0
	}
	return 1
}

// appendCombined appends nginx's combined format: the time is when the
// request arrived (Apache's %t), the byte count the body's.
func (r *Record) appendCombined(b []byte, clk *Clock, sent int64) []byte {
	b = r.client.AppendTo(b)
	b = append(b, " - - ["...)
	b = append(b, clk.local...)
	b = append(b, "] "...)
	switch {
	case !r.method.ok:
		b = append(b, `"-"`...)
	case r.target.n == 0: // HTTP/2 CONNECT names no path: nginx's "-"
		b = appendQuoted(b, r.field(r.method), space, dash, space, protoBytes[r.protoIndex()])
	default:
		b = appendQuoted(b, r.field(r.method), space, r.field(r.target), space, protoBytes[r.protoIndex()])
	}
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, max(sent, 0), 10)
	// Referer and User-Agent, "-" for a request that could not be parsed,
	// as nginx writes them: every line has every field.
	b = append(b, ' ')
	b = appendHeaderField(b, r.field(r.referer), r.referer.ok)
	b = append(b, ' ')
	b = appendHeaderField(b, r.field(r.agent), r.agent.ok)
	return append(b, '\n')
}

// appendJSON appends one JSON object: every key always present, null
// where the request had no such thing.
func (r *Record) appendJSON(b []byte, clk *Clock, sent int64, dur time.Duration, ktls bool) []byte {
	b = append(b, `{"time":"`...)
	b = append(b, clk.utc...)
	b = append(b, '.')
	b = appendDigits(b, int64(r.at.Nanosecond()/1e6), 3)
	b = append(b, 'Z')
	b = append(b, `","client":"`...)
	b = r.client.AppendTo(b)
	b = append(b, `","site":"`...)
	b = append(b, r.name...) // a validated domain: nothing to escape
	b = append(b, `","method":`...)
	b = r.appendJSONField(b, r.method)
	b = append(b, `,"path":`...)
	b = r.appendJSONField(b, r.target)
	b = append(b, `,"protocol":"`...)
	b = append(b, protoBytes[r.protoIndex()]...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(r.status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, max(sent, 0), 10)
	b = append(b, `,"duration":`...)
	b = appendSeconds(b, dur)
	b = append(b, `,"ttfb":`...)
	b = appendSeconds(b, r.ttfb)
	b = append(b, `,"upstream":`...)
	if r.upAddr.IsValid() {
		b = append(b, '"')
		b = r.upAddr.AppendTo(b)
		b = append(b, `","upstream_status":`...)
		b = strconv.AppendInt(b, int64(r.upStatus), 10)
		b = append(b, `,"upstream_header_time":`...)
		if r.upTime < 0 {
			b = append(b, "null"...)
		} else {
			b = appendSeconds(b, r.upTime)
		}
	} else {
		b = append(b, `null,"upstream_status":null,"upstream_header_time":null`...)
	}
	b = append(b, `,"tls":`...)
	switch r.tlsVer {
	case 0:
		b = append(b, "null"...)
	case tls.VersionTLS13:
		b = append(b, `"1.3"`...)
	case tls.VersionTLS12:
		b = append(b, `"1.2"`...)
	default:
		b = append(b, `"other"`...)
	}
	b = append(b, `,"ktls":`...)
	b = strconv.AppendBool(b, ktls)
	b = append(b, `,"repr_digest":`...)
	b = strconv.AppendBool(b, r.digest)
	b = append(b, `,"referer":`...)
	b = r.appendJSONField(b, r.referer)
	b = append(b, `,"user_agent":`...)
	b = r.appendJSONField(b, r.agent)
	return append(b, "}\n"...)
}

func (r *Record) appendJSONField(b []byte, s span) []byte {
	if !s.ok {
		return append(b, "null"...)
	}
	return appendJSONString(b, r.field(s))
}
