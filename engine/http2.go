package engine

import (
	"errors"
	"time"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/transport"
	"github.com/mediaship/engine/h2"
	"github.com/mediaship/engine/internal/fileio"
)

// h2Handler drives HTTP/2 connections on one loop, over the same streams
// (plain or TLS) as HTTP/1.1. Its scratch state is shared by the loop's
// connections.
type h2Handler struct {
	// Immutable after construction.
	lc  *loopCtx
	srv *Server

	// Owned by the loop goroutine.
	fields hpackFields
	conns  map[*h2Conn]struct{}
	ticks  int
}

// h2Conn is one HTTP/2 connection. It is the Producer of its stream: the
// stream asks it for frames as the socket drains.
type h2Conn struct {
	// Owned by the loop goroutine.
	h     *h2Handler
	c     *reactor.Conn
	s     *transport.Stream
	conn  *h2.Conn
	parts []files.Part // scratch for body slices

	held          []*h2Strm // done streams whose bodies may still be queued
	shut          bool      // GOAWAY for shutdown sent
	proxyBuffered int       // proxied response bytes waiting in its streams' buffers
	idleSince     int64     // loop time the last stream ended; 0 while streams are open
	closing       bool      // CloseGracefully called
	drainSince    int64     // loop time Serve first saw the loop draining; 0 before
}

// firstStreamWait is how long a draining server waits for the first
// stream of a connection that has none before its GOAWAY.
const firstStreamWait = time.Second

// h2Strm is the engine's state for one stream.
type h2Strm struct {
	st       *h2.Stream
	resp     transport.Response // the transport's tally of its body
	files    files.Scratch
	d        decision // where the request goes
	fetching bool     // a worker is opening its files
	rec      accesslog.Record
	size     int64 // the file's size at loop time sizeAt (present)
	sizeAt   int64
	proxy    *h2Client // a proxied request; nil for files
}

func newH2Handler(lc *loopCtx) *h2Handler {
	return &h2Handler{lc: lc, srv: lc.srv, conns: map[*h2Conn]struct{}{}}
}

// start makes c an HTTP/2 connection over s.
func (hh *h2Handler) start(c *reactor.Conn, s *transport.Stream) *h2Conn {
	srv := hh.srv
	hc := &h2Conn{h: hh, c: c, s: s}
	hc.conn = h2.NewConn(h2.Config{
		MaxConcurrentStreams: uint32(srv.cfg.Runtime.Settings.H2MaxConcurrentStreams),
		MaxHeaderListSize:    uint32(srv.cfg.Limits.MaxHeaderBytes),
		OnEvent:              hc.event,
	}, hc)
	hh.conns[hc] = struct{}{}
	srv.stats.H2Connections.Add(1)
	// The header_timeout set at accept still runs: it covers the TLS
	// handshake, the preface and the first request (stateFirst).
	return hc
}

func (hc *h2Conn) event(e h2.Event, err error) {
	st := &hc.h.srv.stats
	st.h2Events[e].Add(1)
	if e == h2.EventMalformed || e == h2.EventRefused || e == h2.EventHeaderTooLarge {
		return // the stream's answer says it; no log line per request
	}
	args := []any{"peer", hc.c.Peer(), "event", e.String()}
	if err != nil {
		args = append(args, "err", err)
	}
	hc.h.lc.note("HTTP/2 limit or protocol error", args...)
}

// serve runs the connection as far as it can go.
func (hh *h2Handler) serve(hc *h2Conn) {
	c, s := hc.c, hc.s
	s.Pump()
	if !s.Busy() {
		hc.releaseHeld()
	}
	for !hc.conn.Dead() {
		in := s.Input()
		if len(in) == 0 {
			break
		}
		n, err := hc.conn.Feed(in, int64(hh.lc.loop.Now().UnixNano()))
		s.Consume(n)
		if err != nil {
			var ce *h2.ConnError
			if errors.As(err, &ce) && ce.Code != 0 {
				hh.srv.stats.H2ConnErrors.Add(1)
			}
			break
		}
		if n == 0 {
			break
		}
		if !s.Advance() {
			return // the stream ended the connection (a TLS error)
		}
	}
	if c.Closed() {
		return
	}
	if s.EOF() {
		s.End() // HTTP/2 clients do not half-close: the client is gone
		return
	}
	if hh.lc.loop.Draining() && !hc.shut {
		// A connection without a stream yet gets its first request's
		// answer before GOAWAY (or GOAWAY after firstStreamWait): its
		// client opened it for a request, and a Go client fails rather
		// than retries a first request its new connection refused.
		now := hh.lc.loop.Now().UnixNano()
		if hc.drainSince == 0 {
			hc.drainSince = now
		}
		if hc.conn.Started() || now-hc.drainSince >= int64(firstStreamWait) {
			hc.shut = true
			hc.conn.Shutdown()
		}
	}
	hc.output()
	if hc.conn.Dead() || hc.conn.Finished() {
		if !hc.conn.HasOutput() && !hc.closing {
			hc.closing = true
			s.CloseGracefully()
		}
		return
	}
	switch {
	case hc.conn.Open() > 0:
		// Streams in progress: each is bounded by send_timeout (Expire),
		// a header block in progress by header_timeout (tick).
		c.SetReadDeadline(0)
		hc.idleSince = 0
	case !hc.conn.Started():
		// stateFirst: the header_timeout from accept still runs.
	case hc.idleSince == 0:
		// tick sends GOAWAY once idle_timeout has passed; the deadline
		// closes a connection whose client does not take it.
		hc.idleSince = hh.lc.loop.Now().UnixNano()
		c.SetReadDeadline(hh.srv.cfg.Limits.IdleTimeout.D() + idleGoAwayGrace)
	}
}

// idleGoAwayGrace is how long an idle connection may stay open after its
// idle GOAWAY before it is closed regardless.
const idleGoAwayGrace = 5 * time.Second

// output hands the connection's frames to the stream, which asks for
// them (Produce) as the socket drains.
func (hc *h2Conn) output() {
	hc.checkRetiring()
	if hc.conn.HasOutput() {
		hc.s.WriteFrom(hc)
	}
	hc.s.Pump()
}

// checkRetiring sends GOAWAY when the stream asks the connection to end
// (its TLS key is worn out): the client moves to a new connection while
// the open streams finish.
func (hc *h2Conn) checkRetiring() {
	if !hc.shut && hc.s.Retiring() {
		hc.shut = true
		hc.conn.Shutdown()
	}
}

// Produce gives the stream up to budget bytes of frames
// (transport.Producer).
func (hc *h2Conn) Produce(out transport.Sink, budget int) int {
	hc.checkRetiring()
	return hc.conn.Produce(frameSink{hc, out}, budget)
}

// Copied releases the done streams: their bodies have been read
// (transport.Producer).
func (hc *h2Conn) Copied() { hc.releaseHeld() }

// frameSink passes frames to the stream: control frames and DATA headers
// as bytes, payloads as body ranges of the stream's response.
type frameSink struct {
	hc  *h2Conn
	out transport.Sink
}

func (f frameSink) Bytes(p []byte) { f.out.Write(p) }

func (f frameSink) Data(st *h2.Stream, hdr []byte, off int64, n int) bool {
	hc := f.hc
	hs := st.User.(*h2Strm)
	if hs.proxy != nil {
		return hs.proxy.take(f.out, hdr, off, n)
	}
	resp := &hs.files.Resp
	hc.parts = bodySlice(resp.Parts, off, int64(n), hc.parts[:0])
	var end int64 // the furthest file byte this frame needs
	for _, p := range hc.parts {
		if p.Mem == nil {
			end = max(end, p.Off+p.Len)
		}
	}
	if end > 0 && !hc.present(hs, resp, end) {
		// The file shrank under the length this response promised, or
		// its bytes were rewritten under the digest it promised: h2
		// resets this stream alone (INTERNAL_ERROR).
		hc.h.srv.stats.H2BodyFailures.Add(1)
		hc.h.lc.note("file shrank or changed while being sent; HTTP/2 stream reset",
			"peer", hc.c.Peer(), "path", string(st.Req.Path), "stream", st.ID)
		return false
	}
	f.out.Write(hdr)
	for _, p := range hc.parts {
		f.out.Body(&hs.resp, partBody(resp, p), 0, p.Len)
	}
	return true
}

// present reports whether hs's file still holds its bytes up to end,
// asking the file once per loop iteration per stream (a batch of frames).
func (hc *h2Conn) present(hs *h2Strm, resp *files.Response, end int64) bool {
	now := hc.h.lc.loop.Now().UnixNano()
	if hs.sizeAt == now && end <= hs.size {
		return true
	}
	size, changed, err := fileio.Stat(resp.File.Fd(), resp.File.Version())
	if err != nil {
		return false
	}
	if changed {
		size = 0 // rewritten in place: none of its bytes are the ones promised
	}
	hs.size, hs.sizeAt = size, now
	return end <= size
}

// bodySlice returns the pieces of a body (parts laid end to end) covering
// n bytes from off, appended to dst.
func bodySlice(parts []files.Part, off, n int64, dst []files.Part) []files.Part {
	for _, p := range parts {
		if n <= 0 {
			break
		}
		size := p.Len
		if p.Mem != nil {
			size = int64(len(p.Mem))
		}
		if off >= size {
			off -= size
			continue
		}
		k := min(size-off, n)
		if p.Mem != nil {
			dst = append(dst, files.Part{Mem: p.Mem[off : off+k], Len: k})
		} else {
			dst = append(dst, files.Part{Off: p.Off + off, Len: k})
		}
		n -= k
		off = 0
	}
	return dst
}

// Request answers a stream whose request head is complete (h2.Handler).
func (hc *h2Conn) Request(st *h2.Stream) {
	hs := &h2Strm{st: st}
	st.User = hs
	hc.beginRecord(hs)
	hc.decide(hs)
	hc.answer(hs)
}

// decide routes and judges the stream's request (decide).
func (hc *h2Conn) decide(hs *h2Strm) {
	hh := hc.h
	r := &hs.st.Req
	host := r.Authority
	if len(host) == 0 {
		host = r.Get("host") // a Host field (h2 refuses one that differs from a :authority)
	}
	path, query := splitTarget(r.Path)
	f := reqFacts{proto: protoH2, host: host, method: r.Method, path: path, query: query, peer: hc.c.Peer().Addr(), hdr: r, now: hh.lc.loop.Now()}
	if sess := hc.s.Session(); sess != nil {
		f.tls, f.sni, f.version = true, sess.ServerName, sess.Version
	}
	hs.d, hh.lc.hostBuf = hh.srv.decide(&f, hh.lc.hostBuf)
}

// answer starts the answer to the stream's decided request.
func (hc *h2Conn) answer(hs *h2Strm) {
	hh := hc.h
	r := &hs.st.Req
	path, query := splitTarget(r.Path)
	resp := &hs.files.Resp
	switch d := &hs.d; {
	case d.slow != nil:
		hc.verify(hs)
		return
	case d.route != nil && d.status == 0:
		hc.startProxyH2(hs, d.route)
		return
	case d.page && d.status == 0:
		hh.srv.diagPage(resp, d)
	case d.status != 0:
		refusal(resp, d)
	default:
		s := d.site
		fr := files.Request{Head: string(r.Method) == "HEAD", Path: d.servedPath(path), Query: query, Header: r, AlsoETag: d.alsoETag()}
		if !hh.srv.cache.Serve(&s.files, &fr, &hs.files) {
			if !hs.files.Pending() {
				hh.lc.log.Error("file layer gave no answer and asked for nothing", "path", string(r.Path))
				files.ErrorResponse(resp, 500)
				break
			}
			hc.fetch(hs)
			return
		}
	}
	hc.respond(hs)
}

// verify runs the decision's slow check (a password hash) on a worker,
// then decides the request again and answers it.
func (hc *h2Conn) verify(hs *h2Strm) {
	hs.fetching = true
	hc.conn.MarkBusy(hs.st)
	l := hc.h.lc.loop
	slow := hs.d.slow
	l.HandedOff()
	l.Pool().Submit(func() {
		slow()
		l.Post(func() {
			hs.fetching = false
			hc.conn.WorkDone(hs.st)
			if hs.st.Reset || hc.c.Closed() {
				return
			}
			hc.decide(hs)
			hc.answer(hs)
			hc.c.Wake()
		})
	})
}

// fetch opens the stream's files on a worker; the answer follows.
func (hc *h2Conn) fetch(hs *h2Strm) {
	hs.fetching = true
	hc.conn.MarkBusy(hs.st)
	l := hc.h.lc.loop
	cache, site := hc.h.srv.cache, &hs.d.site.files
	l.HandedOff()
	l.Pool().Submit(func() {
		hs.files.Fetch(cache, site)
		l.Post(func() {
			hs.fetching = false
			hc.conn.WorkDone(hs.st)
			if hs.st.Reset || hc.c.Closed() {
				hs.files.Reset() // nobody waits for it any more
				return
			}
			r := &hs.st.Req
			path, query := splitTarget(r.Path)
			fr := files.Request{Head: string(r.Method) == "HEAD", Path: hs.d.servedPath(path), Query: query, Header: r, AlsoETag: hs.d.alsoETag()}
			if !hc.h.srv.cache.Serve(site, &fr, &hs.files) {
				if hs.files.Pending() {
					hc.fetch(hs)
					return
				}
				files.ErrorResponse(&hs.files.Resp, 500)
			}
			hc.respond(hs)
			hc.c.Wake()
		})
	})
}

func splitTarget(t []byte) (path, query []byte) {
	for i, c := range t {
		if c == '?' {
			return t[:i], t[i+1:]
		}
	}
	return t, nil
}

// respond queues the head of hs's response; its body follows as the
// scheduler and flow control allow.
func (hc *h2Conn) respond(hs *h2Strm) {
	hh := hc.h
	srv := hh.srv
	st := hs.st
	resp := &hs.files.Resp
	r := &st.Req
	isHead := string(r.Method) == "HEAD"
	if isHead {
		resp.NoBody = true
	}
	path, _ := splitTarget(r.Path)
	srv.outcome(hh.lc.log, hh.lc.limiter, &hs.d, resp.Status, resp.Err, path, hc.c.Peer())
	srv.stats.H2Streams.Add(1)

	hh.fields.f = hh.fields.f[:0]
	writeFields(&hh.fields, resp, hs.d.site, hs.d.policyResp(), hh.lc.httpDate())
	f := hh.fields.f
	var body int64
	if !resp.NoBody {
		body = resp.ContentLength
		if hs.d.site != nil {
			hh.lc.bulkPolicy(hc.c, resp, hs.d.site)
		}
	}
	if hs.d.site != nil {
		srv.fileAnswer(hs.d.site, resp)
	}
	switch {
	case hs.d.route != nil:
		hs.rec.SetSite(srv.siteProxy(), hs.d.route.Cfg.Domain)
	case hs.d.site != nil:
		hs.rec.SetSite(hs.d.site.idx, hs.d.site.label())
	}
	hs.rec.Respond(resp.Status, resp.ReprDigest != "")
	hc.conn.Respond(st, resp.Status, f, body)
}

// StreamDone releases a stream (h2.Handler) once nothing queued refers to
// its body: when the stream has copied it (Copied) or the socket has taken
// everything (serve).
func (hc *h2Conn) StreamDone(st *h2.Stream) {
	hs, _ := st.User.(*h2Strm)
	if hs == nil {
		return // refused or malformed before the handler saw it
	}
	if st.Reset {
		hc.h.srv.stats.H2Resets.Add(1)
	}
	hc.logStream(hs)
	if hs.proxy != nil {
		hs.proxy.streamDone()
		return
	}
	if hs.fetching {
		return // the worker's answer releases it
	}
	if hc.s.Busy() {
		hc.held = append(hc.held, hs)
		return
	}
	hs.files.Reset()
}

// releaseHeld releases the done streams.
func (hc *h2Conn) releaseHeld() {
	for _, hs := range hc.held {
		hs.files.Reset()
	}
	clear(hc.held)
	hc.held = hc.held[:0]
}

// closed releases everything when the connection is gone.
func (hc *h2Conn) closed() {
	delete(hc.h.conns, hc)
	hc.conn.Abandon()
	hc.releaseHeld()
}

// tick enforces the stall timeout on the loop's HTTP/2 connections, once
// a second.
func (hh *h2Handler) tick() {
	if hh.ticks++; hh.ticks%4 != 0 || len(hh.conns) == 0 {
		return
	}
	now := hh.lc.loop.Now().UnixNano()
	timeout := int64(hh.srv.cfg.Limits.SendTimeout.D())
	idle := int64(hh.srv.cfg.Limits.IdleTimeout.D())
	header := int64(hh.srv.cfg.Limits.HeaderTimeout.D())
	body := int64(hh.srv.cfg.Limits.BodyTimeout.D())
	for hc := range hh.conns {
		if hc.drainSince != 0 && !hc.shut {
			hc.c.Wake() // firstStreamWait may be over
		}
		if hc.conn.ExpireHeaders(now, header) != nil {
			hh.srv.stats.H2ConnErrors.Add(1)
			hc.c.Wake()
			continue
		}
		if hc.conn.Open() == 0 {
			// Idle too long: GOAWAY (NO_ERROR) tells the client not to
			// reuse the connection, then it closes, as nginx does.
			if hc.idleSince != 0 && !hc.shut && now-hc.idleSince > idle {
				hc.shut = true
				hc.conn.Shutdown()
				hc.c.Wake()
			}
			continue
		}
		hc.conn.Expire(now, timeout, body)
		if hc.conn.HasOutput() || hc.conn.Dead() {
			hc.c.Wake()
		}
	}
}

// beginRecord starts the record of hs's request.
func (hc *h2Conn) beginRecord(hs *h2Strm) {
	srv := hc.h.srv
	var ver uint16
	if sess := hc.s.Session(); sess != nil {
		ver = sess.Version
	}
	r := &hs.st.Req
	hs.rec.Begin(time.Time{}, protoH2, hc.c.Peer().Addr(), ver, srv.siteNone(), srv.alog != nil, r.Method, r.Path)
	if srv.alog != nil {
		ref, ua := r.Get("referer"), r.Get("user-agent")
		hs.rec.Headers(ref, ref != nil, ua, ua != nil)
	}
}

// logStream counts hs's response and logs it, once.
func (hc *h2Conn) logStream(hs *h2Strm) {
	hc.h.lc.logResponse(&hs.rec, hs.st.Sent(), hc.s.KernelTLS())
}
