package engine

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/h2"
	"github.com/mediaship/engine/internal/fileio"
	"github.com/mediaship/engine/ktls"
)

// h2Handler drives HTTP/2 connections on one loop, over the same streams
// (plain or TLS) as HTTP/1.1. Its scratch state is shared by the loop's
// connections.
type h2Handler struct {
	// Immutable after construction.
	h1  *h1Handler
	srv *Server

	// Owned by the loop goroutine.
	fields []hpack.HeaderField
	conns  map[*h2Conn]struct{}
	ticks  int
}

// h2Conn is one HTTP/2 connection.
type h2Conn struct {
	// Owned by the loop goroutine.
	h     *h2Handler
	c     *reactor.Conn
	s     stream
	t     *tlsConn // nil on a plain connection
	conn  *h2.Conn
	parts []files.Part // scratch for body slices

	filling     bool      // a fill source is queued (userspace TLS)
	fillErr     error     // a file could not be read while filling
	wantPromote bool      // a response passed promote_after: hand TLS to the kernel
	held        []*h2Strm // done streams whose file ranges may still be queued
	shut        bool      // GOAWAY for shutdown sent
	idleSince   int64     // loop time the last stream ended; 0 while streams are open
	closing     bool      // closeGracefully called
}

// h2Strm is the engine's state for one stream.
type h2Strm struct {
	st       *h2.Stream
	files    files.Scratch
	site     *site
	fetching bool  // a worker is opening its files
	byRef    bool  // body queued by reference (sendfile): keep files until written
	user     int64 // body bytes sealed in userspace
	logLine  []byte
	logged   bool
}

func newH2Handler(h1 *h1Handler) *h2Handler {
	return &h2Handler{h1: h1, srv: h1.srv, conns: map[*h2Conn]struct{}{}}
}

// start makes c an HTTP/2 connection over s (t when it is TLS).
func (hh *h2Handler) start(c *reactor.Conn, s stream, t *tlsConn) *h2Conn {
	srv := hh.srv
	hc := &h2Conn{h: hh, c: c, s: s, t: t}
	hc.conn = h2.NewConn(h2.Config{
		MaxConcurrentStreams: uint32(srv.cfg.Runtime.Settings.H2MaxConcurrentStreams),
		MaxHeaderListSize:    uint32(srv.cfg.Limits.MaxHeaderBytes),
		OnEvent:              hc.event,
	}, hc)
	hh.conns[hc] = struct{}{}
	srv.stats.h2Conns.Add(1)
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
	hc.h.h1.limiter.log(hc.h.h1.log, "HTTP/2 limit or protocol error", args...)
}

// serve runs the connection as far as it can go.
func (hh *h2Handler) serve(hc *h2Conn) {
	c, s := hc.c, hc.s
	s.pump()
	if !s.busy() {
		hc.releaseHeld(true)
	}
	for !hc.conn.Dead() {
		in := s.input()
		if len(in) == 0 {
			break
		}
		n, err := hc.conn.Feed(in, int64(hh.h1.loop.Now().UnixNano()))
		s.consume(n)
		if err != nil {
			var ce *h2.ConnError
			if errors.As(err, &ce) && ce.Code != 0 {
				hh.srv.stats.h2ConnErrors.Add(1)
			}
			break
		}
		if n == 0 {
			break
		}
		if hc.t != nil && !hc.t.readRecords() {
			return // the record layer ended the connection
		}
	}
	if c.Closed() {
		return
	}
	if s.eof() {
		c.Close() // HTTP/2 clients do not half-close: the client is gone
		return
	}
	if hh.h1.loop.Draining() && !hc.shut {
		hc.shut = true
		hc.conn.Shutdown()
	}
	hc.output()
	if hc.conn.Dead() || hc.conn.Finished() {
		if !hc.conn.HasOutput() && !hc.filling && !hc.closing {
			hc.closing = true
			s.closeGracefully()
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
		hc.idleSince = hh.h1.loop.Now().UnixNano()
		c.SetReadDeadline(hh.srv.cfg.Limits.IdleTimeout.D() + idleGoAwayGrace)
	}
}

// idleGoAwayGrace is how long an idle connection may stay open after its
// idle GOAWAY before it is closed regardless.
const idleGoAwayGrace = 5 * time.Second

// output moves what the connection can send now towards the socket:
// frames filled into a buffer and sealed as records in userspace TLS,
// or queued by reference (heads in memory, bodies by sendfile) on plain
// connections and after kernel TLS took over.
func (hc *h2Conn) output() {
	s := hc.s
	hc.checkRecordBudget()
	if hc.t != nil && !hc.t.promoted {
		if hc.filling {
			return
		}
		if hc.wantPromote {
			hc.wantPromote = false
			if hc.t.canPromote() {
				hc.t.promoteNext()
				s.pump()
				return
			}
		}
		if hc.conn.HasOutput() {
			hc.filling = true
			hc.t.writeFill(&h2Fill{hc: hc})
			s.pump()
		}
		return
	}
	if s.busy() {
		return // the socket has not taken what was queued: wait for it
	}
	budget := int(hc.h.srv.cfg.Runtime.Settings.H2SendBuffer)
	for budget > 0 {
		n := hc.conn.Produce(refSink{hc}, budget)
		if n == 0 {
			break
		}
		budget -= n
	}
	s.pump()
}

// checkRecordBudget sends GOAWAY when the TLS write key has protected half
// the records it safely can (RFC 8446 §5.5): the client moves to a new
// connection while the open streams finish.
func (hc *h2Conn) checkRecordBudget() {
	if t := hc.t; t != nil && t.seal != nil && !hc.shut && t.seal.Seq()+t.kernelRecords > recordBudget {
		hc.shut = true
		hc.conn.Shutdown()
	}
}

// refSink queues output by reference: control bytes copied, DATA headers
// copied, bodies as file ranges (sendfile) or cached memory.
type refSink struct{ hc *h2Conn }

func (r refSink) Bytes(p []byte) { r.hc.s.write(p) }

func (r refSink) Data(st *h2.Stream, hdr []byte, off int64, n int) {
	hc := r.hc
	hc.s.write(hdr)
	hs := st.User.(*h2Strm)
	hs.byRef = true
	resp := &hs.files.Resp
	for _, p := range bodySlice(resp.Parts, off, int64(n), hc.parts[:0]) {
		if p.Mem != nil {
			hc.s.writeRef(p.Mem)
		} else {
			hc.s.writeFile(resp.File.Fd(), p.Off, p.Len)
		}
	}
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

// h2Fill is the output source of an HTTP/2 connection in userspace TLS:
// each batch fills a plaintext buffer with frames, reading bodies from
// their files, and seals it as full-size records.
type h2Fill struct {
	hc     *h2Conn
	plain  []byte
	sealed []byte
	n      int // bytes of plain filled
	// File reads of the batch, done together after the frames are laid
	// out: consecutive ranges of one file become one preadv.
	reads []fillRead
	iov   [][]byte
}

type fillRead struct {
	fd          int
	off, end    int64
	first, last int // f.iov[first:last]
}

func (f *h2Fill) Next(max int) ([]byte, error) {
	hc := f.hc
	if hc.wantPromote || hc.conn.Dead() && !hc.conn.HasOutput() {
		return nil, nil
	}
	t := hc.t
	if len(t.out) > 0 {
		// The record layer has something to send first (a KeyUpdate
		// answer): end this source; output() queues the next after it.
		return nil, nil
	}
	hc.checkRecordBudget()
	th := t.th
	size := int(th.srv.cfg.Runtime.Settings.H2TLSWriteBuffer)
	if f.plain == nil {
		f.plain = th.getSealBuf(size)[:size]
		f.sealed = th.getSealBuf(size + (size/ktls.MaxPlaintext+1)*t.seal.Overhead())
	}
	f.n = 0
	f.reads, f.iov = f.reads[:0], f.iov[:0]
	for f.n < size {
		if hc.conn.Produce(fillSink{f}, size-f.n) == 0 || hc.wantPromote {
			break
		}
	}
	for _, r := range f.reads {
		got, err := fileio.Preadv(r.fd, f.iov[r.first:r.last], r.off)
		if int64(got) < r.end-r.off && hc.fillErr == nil {
			// The file shrank (or failed) under a promised length: the
			// connection is reset so the client sees a short body.
			hc.fillErr = errors.Join(fileio.ErrShrank, err)
		}
	}
	clear(f.iov)
	hc.releaseHeld(false) // streams finished in this batch: their bytes are read
	if hc.fillErr != nil {
		return nil, hc.fillErr
	}
	if f.n == 0 {
		return nil, nil
	}
	out := f.sealed[:0]
	for p := f.plain[:f.n]; len(p) > 0; {
		k := min(len(p), ktls.MaxPlaintext)
		var err error
		if out, err = t.seal.Seal(out, ktls.RecordApplicationData, p[:k]); err != nil {
			return nil, err
		}
		p = p[k:]
	}
	t.userSent(int64(f.n))
	return out, nil
}

func (f *h2Fill) Release() {
	f.hc.filling = false
	if f.plain != nil {
		f.hc.t.th.putSealBuf(f.plain)
		f.hc.t.th.putSealBuf(f.sealed)
		f.plain, f.sealed = nil, nil
	}
}

// fillSink copies frames into the fill buffer, reading file ranges with
// pread.
type fillSink struct{ f *h2Fill }

func (s fillSink) Bytes(p []byte) { s.f.n += copy(s.f.plain[s.f.n:], p) }

func (s fillSink) Data(st *h2.Stream, hdr []byte, off int64, n int) {
	f := s.f
	hc := f.hc
	f.n += copy(f.plain[f.n:], hdr)
	hs := st.User.(*h2Strm)
	resp := &hs.files.Resp
	for _, p := range bodySlice(resp.Parts, off, int64(n), hc.parts[:0]) {
		dst := f.plain[f.n : f.n+int(p.Len)]
		f.n += int(p.Len)
		if p.Mem != nil {
			copy(dst, p.Mem)
			continue
		}
		fd := resp.File.Fd()
		if k := len(f.reads) - 1; k >= 0 && f.reads[k].fd == fd && f.reads[k].end == p.Off && f.reads[k].last == len(f.iov) {
			f.reads[k].end += p.Len
			f.reads[k].last++
		} else {
			f.reads = append(f.reads, fillRead{fd: fd, off: p.Off, end: p.Off + p.Len, first: len(f.iov), last: len(f.iov) + 1})
		}
		f.iov = append(f.iov, dst)
	}
	hs.user += int64(n)
	if hs.user >= hc.t.promoteAfter() && hc.t.canPromote() {
		hc.wantPromote = true
	}
}

// Request answers a stream whose request head is complete (h2.Handler).
func (hc *h2Conn) Request(st *h2.Stream) {
	hh := hc.h
	hs := &h2Strm{st: st}
	st.User = hs
	r := &st.Req
	s, hb := hh.srv.sites.lookup(r.Authority, hh.h1.hostBuf)
	hh.h1.hostBuf = hb
	hs.site = s
	resp := &hs.files.Resp
	method := string(r.Method)
	path, query := splitTarget(r.Path)
	switch {
	case method != "GET" && method != "HEAD":
		files.ErrorResponse(resp, 405)
		resp.Allow = true
	case len(path) == 0 || path[0] != '/':
		files.ErrorResponse(resp, 400)
	case !s.h2 || hc.t == nil && !s.h2c || hc.t != nil && hh.srv.misdirected(hc.t.sess.ServerName, hc.t.sess.Version, hb):
		files.ErrorResponse(resp, 421)
	default:
		fr := files.Request{Head: method == "HEAD", Path: path, Query: query, Header: r}
		if !hh.srv.cache.Serve(&s.files, &fr, &hs.files) {
			if !hs.files.Pending() {
				hh.h1.log.Error("file layer gave no answer and asked for nothing", "path", string(r.Path))
				files.ErrorResponse(resp, 500)
				break
			}
			hc.fetch(hs)
			return
		}
	}
	hc.respond(hs)
}

// fetch opens the stream's files on a worker; the answer follows.
func (hc *h2Conn) fetch(hs *h2Strm) {
	hs.fetching = true
	hc.conn.MarkBusy(hs.st)
	l := hc.h.h1.loop
	cache, site := hc.h.srv.cache, &hs.site.files
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
			fr := files.Request{Head: string(r.Method) == "HEAD", Path: path, Query: query, Header: r}
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
	switch {
	case resp.Status >= 500:
		srv.stats.serverErrors.Add(1)
		hh.h1.log.Warn("server error", "status", resp.Status, "path", string(r.Path), "peer", hc.c.Peer(), "err", resp.Err)
	case resp.Status == 404:
		srv.stats.notFound.Add(1)
	case (resp.Status == 400 || resp.Status == 403) && resp.Err != nil:
		hh.h1.limiter.log(hh.h1.log, "refused path", "status", resp.Status, "path", string(r.Path), "peer", hc.c.Peer(), "reason", resp.Err)
	}
	srv.stats.requests.Add(1)
	srv.stats.h2Streams.Add(1)

	f := append(hh.fields[:0], hpack.HeaderField{Name: "date", Value: string(hh.h1.httpDate())})
	responseFields(resp, hs.site, func(name, _, value string) {
		f = append(f, hpack.HeaderField{Name: name, Value: value})
	})
	hh.fields = f
	var body int64
	if !resp.NoBody {
		body = resp.ContentLength
		if hs.site != nil {
			hh.h1.bulkPolicy(hc.c, resp, hs.site)
		}
	}
	if resp.NeedDigest != nil && hs.site != nil {
		srv.digests.request(hs.site.files.Root, resp.NeedDigest)
	}
	if srv.alog != nil {
		hs.logLine = hc.startLogLine(hs, resp.Status)
	}
	hc.conn.Respond(st, resp.Status, f, body)
}

// StreamDone releases a stream (h2.Handler): at once when its body was
// copied, after the socket took the queued output when it went by
// reference.
func (hc *h2Conn) StreamDone(st *h2.Stream) {
	hs, _ := st.User.(*h2Strm)
	if hs == nil {
		return // refused or malformed before the handler saw it
	}
	if st.Reset {
		hc.h.srv.stats.h2Resets.Add(1)
	}
	hc.logStream(hs)
	if hs.fetching {
		return // the worker's answer releases it
	}
	if hs.byRef || hc.filling {
		hc.held = append(hc.held, hs)
		return
	}
	hs.files.Reset()
}

// releaseHeld releases done streams once nothing queued refers to their
// files: all of them when the socket has taken everything, else those
// whose bytes were copied (read in the last fill batch).
func (hc *h2Conn) releaseHeld(all bool) {
	kept := hc.held[:0]
	for _, hs := range hc.held {
		if hs.byRef && !all {
			kept = append(kept, hs)
			continue
		}
		hs.files.Reset()
	}
	clear(hc.held[len(kept):])
	hc.held = kept
}

// closed releases everything when the connection is gone.
func (hc *h2Conn) closed() {
	delete(hc.h.conns, hc)
	hc.conn.Abandon()
	hc.releaseHeld(true)
}

// tick enforces the stall timeout on the loop's HTTP/2 connections, once
// a second.
func (hh *h2Handler) tick() {
	if hh.ticks++; hh.ticks%4 != 0 || len(hh.conns) == 0 {
		return
	}
	now := hh.h1.loop.Now().UnixNano()
	timeout := int64(hh.srv.cfg.Limits.SendTimeout.D())
	idle := int64(hh.srv.cfg.Limits.IdleTimeout.D())
	header := int64(hh.srv.cfg.Limits.HeaderTimeout.D())
	body := int64(hh.srv.cfg.Limits.BodyTimeout.D())
	for hc := range hh.conns {
		if hc.conn.ExpireHeaders(now, header) != nil {
			hh.srv.stats.h2ConnErrors.Add(1)
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

// startLogLine builds the access log line up to the status, as for
// HTTP/1.1, with "HTTP/2.0" as the protocol.
func (hc *h2Conn) startLogLine(hs *h2Strm, status int) []byte {
	r := &hs.st.Req
	b := hs.logLine[:0]
	b = hc.c.Peer().Addr().AppendTo(b)
	b = append(b, " - - ["...)
	b = appendLogTime(b, hc.h.h1.loop.Now())
	b = append(b, "] "...)
	reqLine := make([]byte, 0, len(r.Method)+len(r.Path)+10)
	reqLine = append(append(append(reqLine, r.Method...), ' '), r.Path...)
	reqLine = append(reqLine, " HTTP/2.0"...)
	b = appendQuoted(b, reqLine)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	return b
}

func (hc *h2Conn) logStream(hs *h2Strm) {
	if hc.h.srv.alog == nil || len(hs.logLine) == 0 || hs.logged {
		return
	}
	hs.logged = true
	h1 := hc.h.h1
	r := &hs.st.Req
	h1.logBuf = append(h1.logBuf, hs.logLine...)
	h1.logBuf = strconv.AppendInt(h1.logBuf, hs.st.Sent(), 10)
	h1.logBuf = append(h1.logBuf, ' ')
	h1.logBuf = appendHeaderField(h1.logBuf, r.Get("referer"))
	h1.logBuf = append(h1.logBuf, ' ')
	h1.logBuf = appendHeaderField(h1.logBuf, r.Get("user-agent"))
	h1.logBuf = append(h1.logBuf, '\n')
	if len(h1.logBuf) > 32<<10 {
		h1.flushLog()
	}
}
