package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/passthrough"
	"github.com/mediaship/engine/engine/wtpage"
	"github.com/mediaship/engine/h3"
	"github.com/mediaship/engine/internal/httpsyntax"
	"github.com/mediaship/engine/internal/loglimit"
	"github.com/mediaship/engine/internal/reuseport"
	"github.com/mediaship/engine/wt"
	"github.com/quic-go/quic-go/http3"
)

// h3Chunk is how much of a file one DATA frame carries: one pread, one
// stream write. It is also what a stalled HTTP/3 response holds.
const h3Chunk = 128 << 10

// bulkUrgency is the RFC 9218 urgency given to bulk responses whose
// client sent no priority: one below the default (3), so small responses
// on the same connection go first.
const bulkUrgency = 4

// h3Handler answers HTTP/3 requests from the same sites and file layer as
// HTTP/1.1 and HTTP/2. quic-go runs it on a goroutine per request, so it
// may block: files are opened and read in place.
type h3Handler struct {
	srv     *Server
	scratch sync.Pool    // *h3Scratch
	metrics *respMetrics // shared by HTTP/3's goroutines

	limiter *loglimit.Limiter
}

// h3Scratch is one request's working memory, reused.
type h3Scratch struct {
	files files.Scratch
	host  []byte
	buf   []byte // h3.FrameHeaderRoom + h3Chunk
	log   []byte
	rec   accesslog.Record
	clock accesslog.Clock
}

// listenH3 binds the UDP side of the listen address when some TLS site
// serves HTTP/3, and has those sites advertise it.
func (s *Server) listenH3() error {
	quicPass := s.pass != nil && s.pass.Routes.H3
	if !s.cfg.H3Enabled() {
		if quicPass {
			return s.listenQUICPass()
		}
		return nil
	}
	host, port, err := net.SplitHostPort(s.group.Addr())
	if err != nil {
		return err
	}
	udp, err := s.udpSocket()
	if err != nil {
		return fmt.Errorf("engine: %w (HTTP/3 listens on UDP at the TCP port; free the port or set protocols.h3 = false on the TLS sites)", err)
	}
	// The connection IDs carry the generation the socket was given.
	ids := passthrough.NewOwnCIDs(s.quicGen)
	var wrap func(*net.UDPConn) net.PacketConn
	if quicPass {
		wrap = func(udp *net.UDPConn) net.PacketConn {
			s.quic = passthrough.NewRouter(s.pass, udp, ids, s.cfg.Limits.MaxConnections, s.helloWait(), s.log)
			s.quic.SetAccessLog(s.alog)
			s.steerRelays()
			return s.quic.PacketConn()
		}
	}
	hh := &h3Handler{srv: s, limiter: loglimit.New(s.log, clientLogsPerSecond), metrics: newRespMetrics(len(s.sites.all))}
	s.h3Metrics = hh.metrics
	hh.scratch.New = func() any { return &h3Scratch{} }
	c := &s.cfg.H3
	var wtHook h3.WebTransport
	if w := &s.cfg.WebTransport; w.Enabled {
		s.wt = wt.NewServer(wt.Config{
			MaxSessions:           w.MaxSessions,
			MaxSessionsPerAddress: w.MaxSessionsPerAddress,
			MaxStreamsPerSession:  w.MaxStreamsPerSession,
			MaxDatagramBytes:      w.MaxDatagramBytes,
			MaxBytesPerSession:    int64(w.MaxBytesPerSession),
			IdleTimeout:           w.IdleTimeout.D(),
			HeaderTimeout:         s.cfg.Limits.HeaderTimeout.D(),
			Logger:                s.log,
		})
		wtHook = s.wt
		if config.On(w.Page) {
			s.wtPage = wtpage.New()
		}
	}
	h3TLS := &tls.Config{GetCertificate: s.certs.getCertificate}
	bindTickets(h3TLS)
	s.h3, err = h3.Listen(h3.Config{
		Addr:                net.JoinHostPort(host, port),
		Conn:                udp,
		TLS:                 h3TLS,
		Tickets:             s.tickets,
		KeyExchanges:        s.keyExchanges,
		Handler:             hh,
		Logger:              s.log,
		MaxHeaderBytes:      int(s.cfg.Limits.MaxHeaderBytes),
		MaxStreams:          int64(c.MaxStreams),
		StreamReceiveWindow: uint64(c.StreamReceiveWindow),
		ConnReceiveWindow:   uint64(c.ConnectionReceiveWindow),
		IdleTimeout:         s.cfg.Limits.IdleTimeout.D(),
		// quic-go ends a handshake idle this long, or not done in twice
		// it: within header_timeout, as on TCP (stateHandshake).
		HandshakeTimeout: min(10*time.Second, s.cfg.Limits.HeaderTimeout.D()/2),
		MaxConnections:   int64(s.cfg.Limits.MaxConnections),
		PerAddress:       s.peers,
		MinRate:          int64(s.cfg.Limits.MinSendRate),
		RateWindow:       s.cfg.Limits.MinSendRateWindow.D(),
		Allow0RTT:        c.Allow0RTT,
		UDPBuffer:        int(c.UDPBuffer),
		Wrap:             wrap,
		ConnectionIDs:    ids,
		HeaderTimeout:    s.cfg.Limits.HeaderTimeout.D(),
		WebTransport:     wtHook,
	})
	if err != nil {
		return fmt.Errorf("engine: %w (HTTP/3 listens on UDP at the TCP port; free the port or set protocols.h3 = false on the TLS sites)", err)
	}
	alt := s.h3.AltSvc()
	for _, st := range s.sites.all {
		if st.h3 {
			st.altSvc = alt
		}
	}
	rx, tx := s.h3.Buffers()
	if rx < int(c.UDPBuffer) || tx < int(c.UDPBuffer) {
		s.log.Warn("HTTP/3: UDP socket buffers are smaller than asked; bulk transfers may lose packets under load",
			"asked", c.UDPBuffer.String(), "receive", rx, "send", tx,
			"fix", "sysctl -w net.core.rmem_max=16777216 net.core.wmem_max=16777216, or run with CAP_NET_ADMIN")
	}
	return nil
}

// listenQUICPass binds the UDP side of the listen address for QUIC
// passthrough alone, when the engine serves no HTTP/3 of its own.
func (s *Server) listenQUICPass() error {
	udp, err := s.udpSocket()
	if err != nil {
		return fmt.Errorf("engine: QUIC passthrough: %w (free the port, or set [reverse_proxy.protocols] h3 = false)", err)
	}
	h3.SetBuffers(udp, int(s.cfg.H3.UDPBuffer))
	s.quicUDP = udp
	s.quic = passthrough.NewRouter(s.pass, udp, nil, s.cfg.Limits.MaxConnections, s.helloWait(), s.log)
	s.quic.SetAccessLog(s.alog)
	s.steerRelays()
	return nil
}

// steerRelays has the QUIC steering keep each relayed flow's client
// address on this generation (reuseport.QUICSteering.HoldRelay), so that
// its flows finish here across a reload or upgrade; and a server that
// handed over waits for them (relaysDone) within shutdown_grace.
func (s *Server) steerRelays() {
	if s.qsteer == nil {
		return
	}
	st, gen := s.qsteer, s.quicGen
	s.quic.SetSteering(func(a netip.AddrPort) {
		if err := st.HoldRelay(a, gen); err != nil {
			s.log.Warn("QUIC passthrough: the kernel's steering could not keep a relayed client here; a reload may cut its flow", "client", a, "err", err)
		}
	}, st.DropRelay)
}

// relaysDone waits until the QUIC relays of a server that handed over
// have ended, or ctx does.
func (s *Server) relaysDone(ctx context.Context) {
	if s.quic == nil || !s.handed.Load() {
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for s.quic.Flows() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// udpSocket is the UDP socket of the engine's QUIC (HTTP/3, QUIC
// passthrough) on the TCP listener's port. Each server has its own, in a
// SO_REUSEPORT group steered by generation (reuseport.QUICSteering):
// the first binds the port and attaches the program; a successor (a
// reload, or the new process of an upgrade) adopts the program, joins
// the group with a socket of its own under the next generation number,
// and takes new connections once it serves (Run), while its predecessor
// keeps every packet of its own connections until they end. Where the
// program cannot be loaded (no CAP_BPF), the one socket is handed over
// and both servers read it during the drain: a packet of the
// predecessor's connections that the successor reads is dropped there,
// and QUIC's loss recovery sends it again.
func (s *Server) udpSocket() (*net.UDPConn, error) {
	addr := s.group.Addr()
	if st := s.in.takeNamed("quic-steering"); len(st) > 0 {
		steer, err := reuseport.AdoptQUIC(st)
		if err == nil {
			var cur uint8
			if cur, err = steer.Current(); err == nil {
				var c *net.UDPConn
				if c, err = s.joinQUIC(steer, cur+1, addr); err == nil {
					return c, nil
				}
			}
			steer.Close()
		}
		// The predecessor listened elsewhere (a reload that changed the
		// address), or its group cannot be joined: bind as at a start.
		s.log.Info("HTTP/3: not joining the predecessor's QUIC socket group; binding a group of its own", "addr", addr, "reason", err)
	}
	if fs := s.in.take("listen", addr, syscall.SOCK_DGRAM); len(fs) > 0 {
		for _, f := range fs[1:] {
			f.Close()
		}
		defer fs[0].Close()
		return udpConn(fs[0])
	}
	// Nothing passed (or socket activation without a UDP socket, or a
	// predecessor without QUIC): bind as at a start.
	fd, _, err := reuseport.ListenUDP(addr, true)
	if err != nil {
		return nil, err
	}
	steer, serr := reuseport.SteerQUIC(fd, 1)
	f := os.NewFile(uintptr(fd), "udp")
	c, err := udpConn(f)
	f.Close() // c holds a duplicate
	if err != nil {
		if steer != nil {
			steer.Close()
		}
		return nil, err
	}
	if serr != nil {
		s.log.Info("HTTP/3: no eBPF steering of QUIC by generation; a reload or upgrade shares the UDP socket", "reason", serr, "fix", reuseport.Remedy(serr))
		s.quicGen = 0
		return c, nil
	}
	s.qsteer, s.quicGen = steer, 1
	return c, nil
}

// joinQUIC opens generation gen's socket in steer's group.
func (s *Server) joinQUIC(steer *reuseport.QUICSteering, gen uint8, addr string) (*net.UDPConn, error) {
	fd, _, err := reuseport.ListenUDP(addr, false)
	if err != nil {
		return nil, err
	}
	if err := steer.Add(gen, fd); err != nil {
		closeFd(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "udp")
	c, err := udpConn(f)
	f.Close() // c holds a duplicate; the map's entry follows the socket
	if err != nil {
		steer.Remove(gen)
		return nil, err
	}
	s.qsteer, s.quicGen = steer, gen
	return c, nil
}

// udpConn makes a *net.UDPConn of f's socket (a duplicate: f stays the
// caller's to close).
func udpConn(f *os.File) (*net.UDPConn, error) {
	c, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("engine: UDP socket: %w", err)
	}
	udp, ok := c.(*net.UDPConn)
	if !ok {
		c.Close()
		return nil, errors.New("engine: the datagram socket handed over is not UDP")
	}
	return udp, nil
}

// helloWait bounds the gathering of a QUIC ClientHello: header_timeout,
// at most 10 s.
func (s *Server) helloWait() time.Duration {
	return min(s.cfg.Limits.HeaderTimeout.D(), 10*time.Second)
}

// ServeHTTP answers one HTTP/3 request.
func (hh *h3Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	srv := hh.srv
	sc := hh.scratch.Get().(*h3Scratch)
	defer func() {
		sc.files.Reset()
		hh.scratch.Put(sc)
	}()
	hh.beginRecord(r, sc)
	path, query := splitTarget([]byte(r.RequestURI))
	// An authority or target that HTTP/1.1's parser and HTTP/2's request
	// checks refuse is refused here too (RFC 9114 §4.3.1: malformed), so
	// the three protocols route the same names: "a.test:abc" or
	// "*.w.test" reach no site or upstream. (quic-go keeps no :scheme.)
	// (A CONNECT's target is an authority: no path to check.)
	f := reqFacts{proto: protoH3, host: []byte(r.Host), method: []byte(r.Method), path: path,
		malformed: !httpsyntax.ValidHost([]byte(r.Host)) || len(path) > 0 && path[0] == '/' && !httpsyntax.ValidPath([]byte(r.RequestURI))}
	if r.TLS != nil {
		f.tls, f.sni, f.version = true, r.TLS.ServerName, r.TLS.Version
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		f.peer = ap.Addr()
	}
	f.query, f.hdr = query, h3Headers(r.Header)
	var d decision
	d, sc.host = srv.decide(&f, sc.host)
	if d.slow != nil {
		// This goroutine is the request's own: the password hash is
		// checked here, and the request decided again.
		d.slow()
		d, sc.host = srv.decide(&f, sc.host)
		if d.slow != nil {
			// The answer the hash gave was forgotten at once (a cache
			// flooded with wrong passwords): ask again later.
			d.status, d.reason, d.slow = 503, "credential check not kept", nil
		}
	}
	resp := &sc.files.Resp
	switch {
	case d.webTransport:
		hh.serveWebTransport(w, r, query, &d, sc)
		return
	case d.route != nil && d.status == 0:
		sc.rec.SetSite(srv.siteProxy(), d.route.Cfg.Domain)
		status, sent := hh.serveProxyH3(w, r, d.route, &d.pr, path, query, &sc.rec, srv.edgePrepare(&d))
		hh.logRequest(status, sent, sc)
		return
	case d.page && d.status == 0:
		srv.diagPage(resp, &d)
	case d.status != 0:
		refusal(resp, &d)
	default:
		s := d.site
		fr := files.Request{Head: r.Method == "HEAD", Path: d.servedPath(path), Query: query, Header: h3Headers(r.Header), AlsoETag: d.alsoETag()}
		for !srv.cache.Serve(&s.files, &fr, &sc.files) {
			if !sc.files.Pending() {
				srv.log.Error("file layer gave no answer and asked for nothing", "path", r.RequestURI)
				files.ErrorResponse(resp, 500)
				break
			}
			sc.files.Fetch(srv.cache, &s.files)
		}
	}
	if r.Method == "HEAD" {
		resp.NoBody = true
	}
	sent := hh.respond(w, r, path, &d, sc)
	hh.logRequest(resp.Status, sent, sc)
}

// respond sends sc's response, as decided by d, and returns the body
// bytes sent.
func (hh *h3Handler) respond(w http.ResponseWriter, r *http.Request, path []byte, d *decision, sc *h3Scratch) int64 {
	srv := hh.srv
	resp := &sc.files.Resp
	srv.outcome(srv.log, hh.limiter, d, resp.Status, resp.Err, path, r.RemoteAddr)
	srv.stats.H3Streams.Add(1)
	s := d.site
	switch {
	case d.route != nil:
		s = nil // a refusal: no site's fields or pacing
		sc.rec.SetSite(srv.siteProxy(), d.route.Cfg.Domain)
	case s != nil:
		sc.rec.SetSite(s.idx, s.label())
	}

	h := w.Header() // quic-go adds Date
	writeFields(headerFields(h), resp, s, d.policyResp(), nil)
	if s != nil {
		srv.fileAnswer(s, resp)
	}
	w.WriteHeader(resp.Status)
	sc.rec.Respond(resp.Status, resp.ReprDigest != "")
	if resp.NoBody || resp.ContentLength == 0 {
		return 0
	}

	// Pacing: a site's limit_rate paces all its responses; bulk_pace_rate
	// the bulk ones.
	k := &srv.cfg.Kernel
	bulk := resp.Bulk >= int64(k.BulkThreshold)
	var rate int64
	if s != nil {
		rate = int64(s.limitRate)
	}
	if bulk {
		srv.stats.Bulk.Add(1)
		if p := int64(srv.cfg.H3.BulkPaceRate); p > 0 && (rate == 0 || p < rate) {
			rate = p
		}
	}
	if resp.File == nil && rate == 0 {
		// From memory: quic-go's writer, bounded like the file path.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(srv.cfg.Limits.SendTimeout.D()))
		var n int64
		for _, p := range resp.Parts {
			m, err := w.Write(p.Mem)
			n += int64(m)
			if err != nil {
				break
			}
		}
		return n
	}

	var pacer *h3.Pacer
	if rate > 0 {
		pacer = h3.NewPacer(rate)
	}
	body, err := h3.TakeOver(w, pacer, srv.cfg.Limits.SendTimeout.D())
	if err != nil {
		srv.stats.H3Resets.Add(1)
		return 0
	}
	if bulk {
		if _, asked := r.Header["Priority"]; !asked {
			body.SetPriority(bulkUrgency, true)
		}
	}
	if sc.buf == nil {
		sc.buf = make([]byte, h3.FrameHeaderRoom+h3Chunk)
	}
	if err := hh.writeBody(body, resp, sc.buf); err != nil {
		switch {
		case errors.Is(err, h3.ErrStalled):
			srv.stats.H3Stalled.Add(1)
			body.Abort(http3.ErrCodeRequestCanceled)
		case h3.ClientGone(err):
			srv.stats.H3Resets.Add(1)
		default:
			srv.log.Warn("HTTP/3 response cut short", "path", r.RequestURI, "peer", r.RemoteAddr, "err", err)
			body.Abort(http3.ErrCodeInternalError)
		}
		return body.Sent()
	}
	body.Close()
	return body.Sent()
}

// writeBody sends resp's parts, files read chunk by chunk into buf.
func (hh *h3Handler) writeBody(body *h3.Body, resp *files.Response, buf []byte) error {
	room := h3.FrameHeaderRoom
	var iov [1][]byte
	for _, p := range resp.Parts {
		b := partBody(resp, p)
		for off, end := int64(0), b.Len(); off < end; {
			want := int(min(int64(h3Chunk), end-off))
			iov[0] = buf[room : room+want]
			// A body that comes up short (a file that shrank) resets the
			// stream, so the client never takes it for the whole file.
			if got, err := b.ReadAt(iov[:], off); err != nil {
				name := "body"
				if resp.File != nil {
					name = resp.File.Rel()
				}
				return fmt.Errorf("engine: read %s (%d of %d bytes): %w", name, got, want, err)
			}
			if err := body.WriteFrame(buf[:room+want]); err != nil {
				return err
			}
			off += int64(want)
		}
	}
	return nil
}

// beginRecord starts the record of request r.
func (hh *h3Handler) beginRecord(r *http.Request, sc *h3Scratch) {
	var client netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		client = ap.Addr()
	}
	var ver uint16
	if r.TLS != nil {
		ver = r.TLS.Version
	}
	withLog := hh.srv.alog != nil
	if !withLog {
		sc.rec.Begin(time.Time{}, protoH3, client, ver, hh.srv.siteNone(), false, nil, nil)
		return
	}
	sc.rec.Begin(time.Time{}, protoH3, client, ver, hh.srv.siteNone(), true, []byte(r.Method), []byte(r.RequestURI))
	ref, ua := headerBytes(r.Header, "Referer"), headerBytes(r.Header, "User-Agent")
	sc.rec.Headers(ref, ref != nil, ua, ua != nil)
}

// logRequest counts the response (status, sent body bytes) and writes
// its access log line.
func (hh *h3Handler) logRequest(status int, sent int64, sc *h3Scratch) {
	hh.srv.stats.h3Bytes.Add(sent)
	if sc.rec.Status() == 0 { // a proxied answer: its head and body are out
		sc.rec.Respond(status, false)
	}
	sc.log = sc.rec.Finish(hh.metrics, hh.srv.alog, &sc.clock, sc.log[:0], sent, false)
	hh.srv.alog.Write(sc.log)
}

func headerBytes(h http.Header, canonical string) []byte {
	v, ok := h[canonical]
	if !ok {
		return nil
	}
	return []byte(strings.Join(v, ", "))
}

// h3Headers gives the file layer a request's header fields by lowercase
// name.
type h3Headers http.Header

func (h h3Headers) Values(name string, dst [][]byte) [][]byte {
	for _, v := range http.Header(h)[textproto.CanonicalMIMEHeaderKey(name)] {
		dst = append(dst, []byte(v))
	}
	return dst
}

func (h h3Headers) Get(name string) []byte {
	return headerBytes(http.Header(h), textproto.CanonicalMIMEHeaderKey(name))
}
