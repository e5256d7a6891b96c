package engine

import (
	"github.com/mediaship/engine/engine/acme"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/passthrough"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/transport"
	"github.com/mediaship/engine/h2"
	"github.com/mediaship/engine/ktls"
)

// connHandler is a loop's reactor handler. Every connection is one
// transport stream (plain TCP or TLS) that speaks HTTP/1.1 or HTTP/2,
// chosen once: by ALPN after a TLS handshake, by the h2c preface on a
// plain listener where a site allows it.
type connHandler struct {
	// Immutable after construction.
	srv *Server
	env *transport.Env
	lc  *loopCtx
	h1  *h1Handler
	h2  *h2Handler
	// redirect: the [redirect_http] listener (plain HTTP/1.1 only).
	redirect bool

	// Owned by the loop goroutine.
	relays []*passConn // passthrough relays under way, for the idle check
}

// httpConn is one connection: its stream and the driver chosen for it.
type httpConn struct {
	// Owned by the loop goroutine.
	s    *transport.Stream
	h1   *h1Conn   // HTTP/1.1; nil until chosen
	h2   *h2Conn   // HTTP/2; nil until chosen
	pass *passConn // passthrough: set while the ClientHello is read, and for a relayed connection
}

// newConnHandler returns loop l's handler; redirect makes it the
// [redirect_http] listener's: plain HTTP/1.1 answered by handleRedirect.
func newConnHandler(srv *Server, l *reactor.Loop, redirect bool) *connHandler {
	lc := newLoopCtx(srv, l, redirect)
	cfg := srv.cfg
	tlsConf := srv.tlsConfig
	if redirect {
		tlsConf = nil
	}
	env := &transport.Env{
		TLS:           tlsConf,
		HeaderTimeout: cfg.Limits.HeaderTimeout.D(),
		InputSize:     int(cfg.Limits.MaxHeaderBytes) + 2*ktls.MaxPlaintext,
		BatchSize:     int(cfg.Runtime.Settings.H2TLSWriteBuffer),
		SendBuffer:    int(cfg.Runtime.Settings.H2SendBuffer),
		PromoteAfter:  int64(*cfg.Kernel.PromoteAfter),
		KernelTLS:     srv.ktlsOK,
		KernelRekey:   srv.ktlsRekey,
		Stats:         &lc.metrics.tls,
		Log:           lc.log,
		Note:          lc.note,
	}
	return &connHandler{srv: srv, env: env, lc: lc, h1: newH1Handler(lc, redirect), h2: newH2Handler(lc), redirect: redirect}
}

func (h *connHandler) Open(c *reactor.Conn) {
	hc := &httpConn{s: h.env.Open(c)}
	if h.srv.pass != nil && !h.redirect {
		hc.pass = &passConn{h: h, c: c, opened: h.lc.loop.Now()}
	}
	c.State = hc
	// stateHandshake and stateFirst: the header timeout covers the TLS
	// handshake, the h2c preface and the first request.
	c.SetReadDeadline(h.srv.cfg.Limits.HeaderTimeout.D())
}

func (h *connHandler) Closed(c *reactor.Conn) {
	hc := c.State.(*httpConn)
	if pc := hc.pass; pc != nil {
		if pc.r == nil && c.TimedOut() {
			h.srv.pass.Stats.Failures[passthrough.ReasonHelloTimeout].Add(1)
		}
		pc.closed(c)
	}
	hc.s.Closed()
	if hc.h2 != nil {
		hc.h2.closed()
	}
	if hc.h1 != nil {
		h.h1.closed(c, hc.h1)
	}
	c.State = nil
}

func (h *connHandler) Tick() bool {
	h.expireRelays()
	h.h2.tick()
	return h.lc.tick()
}

// Drain keeps open at shutdown (and at a handover to a successor)
// (reactor.Drainer): HTTP/2 connections until they have sent GOAWAY and
// finished their streams; relays, which end as their timeouts say; and a
// connection that has not made its first request yet, which a client
// opened to send one (in a handover, one the predecessor accepted just
// before it stopped): closing it would fail that request, which no
// client retries on a new connection. It gets its answer and the close
// that ends each request of a draining server, within header_timeout.
// Only connections idle between requests are closed at once.
func (h *connHandler) Drain(c *reactor.Conn) bool {
	hc := c.State.(*httpConn)
	return hc.h2 != nil || hc.pass != nil || hc.h1 == nil || hc.h1.requests == 0
}

func (h *connHandler) Serve(c *reactor.Conn) {
	hc := c.State.(*httpConn)
	if hc.pass != nil && h.servePass(c, hc) {
		return
	}
	s := hc.s
	if !s.Advance() || c.Closed() || !s.Ready() {
		return
	}
	switch {
	case hc.h2 != nil:
		h.h2.serve(hc.h2)
	case hc.h1 != nil:
		h.h1.serve(c, hc.h1)
	default:
		h.choose(c, hc)
	}
}

// choose picks the connection's protocol once, then serves it.
func (h *connHandler) choose(c *reactor.Conn, hc *httpConn) {
	s := hc.s
	h2c := false
	if sess := s.Session(); sess != nil {
		if sess.ALPN == acme.ALPN {
			// A TLS-ALPN-01 validation: the handshake was the answer.
			c.Close()
			return
		}
		h2c = sess.ALPN == "h2"
	} else if h.srv.sites.h2c && !h.redirect {
		// HTTP/2 with prior knowledge (RFC 9113 §3.3) on a plain
		// listener where a site allows it.
		in := s.Input()
		if len(in) == 0 {
			if s.EOF() {
				c.Close()
			}
			return // stateFirst: the header_timeout set at accept runs, draining too (Drain)
		}
		n := min(len(in), len(h2.Preface))
		if h2c = string(in[:n]) == h2.Preface[:n]; h2c && n < len(h2.Preface) {
			if s.EOF() {
				c.Close()
			}
			return // wait for the rest of the preface
		}
	}
	if h2c {
		hc.h2 = h.h2.start(c, s)
		h.h2.serve(hc.h2)
		return
	}
	hc.h1 = &h1Conn{s: s}
	h.h1.serve(c, hc.h1)
}

// partBody is the body source of one part of a response, for every
// driver: memory, or a range of the response's open file.
func partBody(resp *files.Response, p files.Part) transport.Body {
	if p.Mem != nil {
		return transport.Mem(p.Mem)
	}
	return transport.File{FD: resp.File.Fd(), Off: p.Off, N: p.Len, Version: resp.File.Version()}
}
