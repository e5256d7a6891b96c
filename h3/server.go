package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/mediaship/engine/internal/loglimit"
	"github.com/mediaship/engine/internal/peershare"
)

// Config tunes an HTTP/3 listener. The zero value of each field means its
// documented default.
type Config struct {
	// Addr is the UDP address to listen on ("0.0.0.0:443").
	Addr string
	// Conn, when set, is the UDP socket to serve instead of binding Addr:
	// a previous server's (a reload or binary upgrade hands it over) or
	// systemd's. The server owns it from Listen on.
	Conn *net.UDPConn
	// TLS chooses certificates (GetCertificate); the server sets TLS 1.3
	// and ALPN h3 on a clone.
	TLS *tls.Config
	// Tickets reports whether the site a client names (SNI) allows TLS
	// session tickets; false makes its handshakes full ones. Nil allows
	// them everywhere.
	Tickets func(serverName string) bool
	// KeyExchanges is the TLS key exchanges (crypto/tls CurvePreferences)
	// of the site a client names (SNI), nil for crypto/tls's default
	// order. Nil offers the default everywhere.
	KeyExchanges func(serverName string) []tls.CurveID
	// Handler answers requests.
	Handler http.Handler
	Logger  *slog.Logger

	// MaxHeaderBytes bounds a request's field section (RFC 9114 §4.2.2
	// size: names, values and 32 bytes per field), advertised in
	// SETTINGS_MAX_FIELD_SECTION_SIZE; larger requests get 431. Zero
	// means 16 KiB.
	MaxHeaderBytes int
	// MaxStreams is the number of request streams a client may have open
	// on one connection (QUIC MAX_STREAMS). Zero means 100.
	MaxStreams int64
	// StreamReceiveWindow and ConnReceiveWindow bound the flow-control
	// windows the server grants for request bodies. Zero means 6 MiB
	// and 15 MiB (quic-go's defaults).
	StreamReceiveWindow, ConnReceiveWindow uint64
	// IdleTimeout closes a connection with no request in flight for this
	// long (with H3_NO_ERROR), and is the QUIC idle timeout. Zero means
	// 75s.
	IdleTimeout time.Duration
	// HandshakeTimeout ends a QUIC handshake that is idle this long, or
	// not complete in twice this long (quic-go's HandshakeIdleTimeout).
	// Zero means 10s.
	HandshakeTimeout time.Duration
	// HeaderTimeout bounds, on connections served with WebTransport, the
	// wait for a stream's first bytes and for a request's HEADERS frame;
	// the stream is reset past it. Zero means 10s.
	HeaderTimeout time.Duration
	// MaxConnections bounds connections, handshakes under way included.
	// At the limit a new connection is admitted by closing the one idle
	// longest (no request in progress), else the slowest below MinRate,
	// and refused (CONNECTION_REFUSED) when there is none (share.go).
	// Zero means 8192.
	MaxConnections int64
	// PerAddress, when set, bounds the connections of one client address
	// (counted with the TCP listeners sharing the table): past it a new
	// one is refused.
	PerAddress *peershare.Table
	// MinRate is the rate, bytes a second over RateWindow, below which a
	// connection with requests in flight may be closed at
	// MaxConnections. Zero: never. RateWindow zero means 20s.
	MinRate    int64
	RateWindow time.Duration
	// Allow0RTT accepts requests in 0-RTT data. They can be replayed by
	// an attacker; off unless set.
	Allow0RTT bool
	// UDPBuffer is the socket buffer size asked for (forced past the
	// sysctl limits where the process may). Zero means 7 MiB.
	UDPBuffer int
	// Wrap, when set, puts a datagram router between the socket and
	// quic-go: quic-go reads and writes through what it returns (TLS
	// passthrough takes the datagrams of relayed connections there). A
	// wrapped socket is read a datagram at a time, without GSO or ECN.
	Wrap func(*net.UDPConn) net.PacketConn
	// ConnectionIDs, when set, issues the IDs of the server's connections
	// (quic.Transport.ConnectionIDGenerator), so that a router given by
	// Wrap can tell their packets from others by ID. Nil means quic-go's
	// own (4 random bytes).
	ConnectionIDs quic.ConnectionIDGenerator
	// WebTransport, when set, serves WebTransport sessions beside HTTP/3:
	// SETTINGS offer them, QUIC datagrams and RESET_STREAM_AT are on, and
	// every connection is served by the listener's own stream loops (see
	// serveRaw and shutdownRaw: a stop then sends no GOAWAY).
	WebTransport WebTransport
}

// Server is an HTTP/3 listener: one quic.Transport on one UDP socket,
// serving requests with quic-go's http3 server.
type Server struct {
	// Immutable after Listen.
	cfg     Config
	log     *slog.Logger
	udp     *net.UDPConn
	tr      *quic.Transport
	ln      listener
	hs      *http3.Server
	bufRx   int // socket buffer sizes obtained
	bufTx   int
	raw     *rawConns                 // with WebTransport: the connections served raw
	drained func(ctx context.Context) // OnDrained; nil without

	acceptOnce sync.Once
	accepting  chan struct{}   // closed once Serve waits for connections
	pumped     chan *quic.Conn // accepted by the pumps, for Serve
	pumpOnce   sync.Once
	pumpDone   chan struct{} // closed when the listener has closed
	pumpErr    error         // why; set before pumpDone closes

	active atomic.Int64 // connections open now: added to by Accept, taken from as each ends; read by ConnContext
	// handshaking counts connections quic-go began (ConnContext) that
	// neither reached the pumps nor ended: handshakes under way.
	handshaking atomic.Int64
	stats       counters
	live        live
	refusals    attempts          // connection attempts refused, counted once each
	retried     attempts          // connection attempts asked for a Retry, counted once each
	lim         *loglimit.Limiter // refusals and closings at the limits
	rollOnce    sync.Once         // starts rollWindows
	closed      chan struct{}     // closed by Close and Shutdown: rollWindows ends
	closeOnce   sync.Once
}

// handshake marks one connection quic-go began; its end is counted once,
// when a pump takes it or when it ends unaccepted.
type handshake struct {
	s    *Server
	key  netip.Addr // the client's count in Config.PerAddress
	done atomic.Bool
}

type handshakeKey struct{}

func (h *handshake) end() {
	if h.done.CompareAndSwap(false, true) {
		h.s.handshaking.Add(-1)
	}
}

// counters are a Server's statistics, updated from quic-go's goroutines
// and read by Stats.
type counters struct {
	conns, refused, handshakeFailures                                     atomic.Int64 // independent counts
	refusedAddress, reclaimedIdle, reclaimedSlow, reclaimedShare, retries atomic.Int64

	mu     sync.Mutex       // guards errors
	errors map[string]int64 // guarded by mu; connection closes with an error, by code
}

// Stats is a snapshot of a Server's counters.
type Stats struct {
	Connections int64 // accepted after the handshake
	Active      int64 // open now
	Refused     int64 // refused at MaxConnections
	// RefusedAddress were refused at their address's share (PerAddress);
	// ReclaimedIdle and ReclaimedSlow closed to admit new ones at
	// MaxConnections; Retries the connection attempts (by address and
	// port) answered with a Retry.
	RefusedAddress, ReclaimedIdle, ReclaimedSlow, ReclaimedShare, Retries int64
	// ConnErrors counts connections closed with an error, by error code
	// ("H3_FRAME_UNEXPECTED", "STREAM_LIMIT_ERROR", …) and by who sent
	// it: "local " or "remote " before the code.
	ConnErrors map[string]int64
}

// Listen binds the UDP socket and prepares the server; Serve answers.
func Listen(cfg Config) (*Server, error) {
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = 16 << 10
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = 100
	}
	if cfg.StreamReceiveWindow == 0 {
		cfg.StreamReceiveWindow = 6 << 20
	}
	if cfg.ConnReceiveWindow == 0 {
		cfg.ConnReceiveWindow = 15 << 20
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 75 * time.Second
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 8192
	}
	if cfg.UDPBuffer == 0 {
		cfg.UDPBuffer = 7 << 20
	}
	if cfg.RateWindow == 0 {
		cfg.RateWindow = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, accepting: make(chan struct{}),
		pumped: make(chan *quic.Conn, acceptQueue), pumpDone: make(chan struct{}), closed: make(chan struct{})}
	s.live.conns = map[*quic.Conn]*connWatch{}
	s.live.memo = map[netip.Addr]int{}
	s.lim = loglimit.New(s.log, 5)
	s.stats.errors = map[string]int64{}

	var err error
	if s.udp = cfg.Conn; s.udp == nil {
		ua, err := net.ResolveUDPAddr("udp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("h3: listen address %q: %w", cfg.Addr, err)
		}
		if s.udp, err = net.ListenUDP("udp", ua); err != nil {
			return nil, fmt.Errorf("h3: listen on udp %s: %w", cfg.Addr, err)
		}
	}
	s.bufRx, s.bufTx = SetBuffers(s.udp, cfg.UDPBuffer)

	tlsConf := cfg.TLS.Clone()
	tlsConf.MinVersion = tls.VersionTLS13
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	tlsConf.GetConfigForClient = nil
	if cfg.Tickets != nil || cfg.KeyExchanges != nil {
		base := tlsConf
		tlsConf = base.Clone()
		tlsConf.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			tickets := cfg.Tickets == nil || cfg.Tickets(hello.ServerName)
			var groups []tls.CurveID
			if cfg.KeyExchanges != nil {
				groups = cfg.KeyExchanges(hello.ServerName)
			}
			if tickets && groups == nil {
				return nil, nil
			}
			c := base.Clone()
			c.SessionTicketsDisabled = !tickets
			if groups != nil {
				c.CurvePreferences = groups
			}
			return c, nil
		}
	}

	var pc net.PacketConn = s.udp
	if cfg.Wrap != nil {
		pc = cfg.Wrap(s.udp)
	}
	s.tr = &quic.Transport{
		Conn:                  pc,
		ConnectionIDGenerator: cfg.ConnectionIDs,
		ConnContext: func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
			key, err := s.admit(ci.RemoteAddr)
			if err != nil {
				return nil, err
			}
			// quic-go cancels ctx when the connection ends, accepted or
			// not.
			h := &handshake{s: s, key: key}
			s.handshaking.Add(1)
			context.AfterFunc(ctx, func() {
				h.end()
				s.cfg.PerAddress.Release(key)
			})
			return context.WithValue(ctx, handshakeKey{}, h), nil
		},
		VerifySourceAddress: s.verifyAddress,
	}
	qc := &quic.Config{
		HandshakeIdleTimeout:           cfg.HandshakeTimeout,
		MaxIdleTimeout:                 cfg.IdleTimeout,
		InitialStreamReceiveWindow:     min(512<<10, cfg.StreamReceiveWindow),
		MaxStreamReceiveWindow:         cfg.StreamReceiveWindow,
		InitialConnectionReceiveWindow: min(768<<10, cfg.ConnReceiveWindow),
		MaxConnectionReceiveWindow:     cfg.ConnReceiveWindow,
		MaxIncomingStreams:             cfg.MaxStreams,
		// The client's control and QPACK streams; push is never used.
		MaxIncomingUniStreams:            4,
		Allow0RTT:                        cfg.Allow0RTT,
		EnableDatagrams:                  cfg.WebTransport != nil,
		EnableStreamResetPartialDelivery: cfg.WebTransport != nil,
		// Congestion control is quic-go's own (CUBIC with pacing); it has
		// no option to choose one. Should it gain one, this is where
		// [kernel] bulk_congestion would select BBR for QUIC too.
	}
	if cfg.Allow0RTT {
		s.ln, err = s.tr.ListenEarly(tlsConf, qc)
	} else {
		s.ln, err = s.tr.Listen(tlsConf, qc)
	}
	if err != nil {
		s.udp.Close()
		return nil, fmt.Errorf("h3: %w", err)
	}
	s.hs = &http3.Server{
		Handler:        activity{cfg.Handler},
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		IdleTimeout:    cfg.IdleTimeout,
		Logger:         nil, // quic-go's own debug lines are not ours to print
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			ctx = context.WithValue(ctx, connKey{}, c)
			w := newConnWatch(c, cfg.IdleTimeout)
			s.track(c, w)
			return context.WithValue(ctx, watchKey{}, w)
		},
	}
	if cfg.WebTransport != nil {
		s.hs.EnableDatagrams = true
		s.hs.AdditionalSettings = cfg.WebTransport.Settings()
		s.raw = &rawConns{conns: map[*quic.Conn]struct{}{}, done: make(chan struct{})}
	}
	return s, nil
}

// connWatch closes a connection on which no request has been answered for
// the idle timeout. quic-go's own HTTP/3 idle timer stops while any
// request stream is open, including one whose client never finishes its
// HEADERS frame, and quic-go offers no hook before the headers are read:
// without this, a client keeping QUIC alive with PINGs could hold such a
// stream, and so the connection and its slot, forever. The watch counts
// only requests that reached the handler, so a connection whose streams
// never became requests is closed (H3_NO_ERROR) idle_timeout after its
// last request, whatever its streams are doing.
type connWatch struct {
	idle      time.Duration // immutable
	mu        sync.Mutex    // guards active, idleSince and the timer's Stop and Reset
	active    int           // guarded by mu: requests in the handler
	idleSince time.Time     // guarded by mu: when active last fell to 0
	live      *live         // the server's registry (its gen), set by track
	timer     *time.Timer   // fires idle after the last request ended

	// The rate window, guarded by Server.live.mu: bytes sent at the
	// start of this window and of the one before, and when they began.
	winSent, prevSent   uint64
	winStart, prevStart time.Time
	key                 netip.Addr // the client's count in Config.PerAddress (immutable once tracked)
}

type watchKey struct{}

func newConnWatch(c *quic.Conn, idle time.Duration) *connWatch {
	w := &connWatch{idle: idle}
	w.timer = time.AfterFunc(idle, func() {
		w.mu.Lock()
		busy := w.active > 0
		w.mu.Unlock()
		if !busy {
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "idle timeout")
		}
	})
	context.AfterFunc(c.Context(), func() { w.timer.Stop() })
	return w
}

// activity tells each request's connection watch when it starts and ends.
type activity struct{ h http.Handler }

func (a activity) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	clearHeaderDeadline(rw)
	if w, _ := r.Context().Value(watchKey{}).(*connWatch); w != nil {
		w.mu.Lock()
		w.active++
		w.timer.Stop()
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			if w.active--; w.active == 0 {
				w.timer.Reset(w.idle)
				w.idleSince = time.Now()
				if w.live != nil {
					w.live.gen.Add(1)
				}
			}
			w.mu.Unlock()
		}()
	}
	a.h.ServeHTTP(rw, r)
}

// Addr returns the UDP address the server listens on.
func (s *Server) Addr() *net.UDPAddr { return s.udp.LocalAddr().(*net.UDPAddr) }

// Buffers returns the socket buffer sizes the kernel granted.
func (s *Server) Buffers() (rx, tx int) { return s.bufRx, s.bufTx }

// AltSvc returns the Alt-Svc field value that advertises this listener
// to clients of the TCP side: h3 on the same port, for a day.
func (s *Server) AltSvc() string {
	return `h3=":` + strconv.Itoa(s.Addr().Port) + `"; ma=86400`
}

// Serve answers requests until Shutdown or Close.
func (s *Server) Serve() error {
	if s.raw != nil {
		s.raw.mu.Lock()
		s.raw.serving = true
		s.raw.mu.Unlock()
		return s.serveRaw()
	}
	err := s.hs.ServeListener(countingListener{s})
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown sends GOAWAY on every connection, lets the requests in flight
// finish until ctx ends, then closes what remains and the socket. With
// WebTransport it refuses new requests instead of sending GOAWAY (see
// shutdownRaw).
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	if s.raw != nil {
		err = s.shutdownRaw(ctx)
	} else {
		s.ln.Close() // no new connections; those open continue
		err = s.hs.Shutdown(ctx)
	}
	if s.drained != nil {
		s.drained(ctx)
	}
	s.tr.Close()
	s.udp.Close() // the Transport closes only a socket it made itself
	s.closeOnce.Do(func() { close(s.closed) })
	return err
}

// Handshaking is the number of handshakes under way: connections begun
// and neither accepted nor ended. Closing the listener (Shutdown) refuses
// them (CONNECTION_REFUSED), so a server that handed over waits for this
// to reach 0 first.
func (s *Server) Handshaking() int64 { return s.handshaking.Load() }

// HandshakesDone waits until no handshake is under way (Handshaking),
// and at least min; at most until quic-go's handshake timeout would have
// ended every handshake begun before the call (twice HandshakeTimeout),
// or until ctx ends. It returns the handshakes still under way.
func (s *Server) HandshakesDone(ctx context.Context, min time.Duration) int64 {
	least := time.NewTimer(min)
	defer least.Stop()
	limit := time.NewTimer(2*s.cfg.HandshakeTimeout + time.Second)
	defer limit.Stop()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for over := false; ; {
		select {
		case <-ctx.Done():
			return s.Handshaking()
		case <-limit.C:
			return s.Handshaking()
		case <-least.C:
			over = true
		case <-t.C:
		}
		if over && s.Handshaking() == 0 {
			return 0
		}
	}
}

// Accepting is closed once Serve waits for connections: quic-go queues
// at most 32 finished handshakes for it and refuses the next ones
// (CONNECTION_REFUSED), so a server that is about to take a burst of new
// connections (a successor taking over) waits for this first.
func (s *Server) Accepting() <-chan struct{} { return s.accepting }

// OnDrained has Shutdown call wait once the server's own connections are
// done and before it closes the socket: what else reads the socket
// through Config.Wrap (QUIC passthrough's relays) finishes there.
func (s *Server) OnDrained(wait func(ctx context.Context)) { s.drained = wait }

// Close closes every connection and the socket at once.
func (s *Server) Close() error {
	if s.raw != nil {
		s.closeRaw("server closed")
	}
	err := s.hs.Close()
	s.ln.Close()
	s.tr.Close()
	s.udp.Close()
	s.closeOnce.Do(func() { close(s.closed) })
	return err
}

// Handover returns a duplicate of the UDP socket, for a successor (a
// reload or a binary upgrade) to serve new connections on. Until this
// server's Shutdown ends, both read the socket: a datagram of one of this
// server's connections read by the successor is dropped there (it knows
// no such connection, and sends no stateless reset), and QUIC's loss
// recovery sends it again.
func (s *Server) Handover() (*os.File, error) { return s.udp.File() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Connections: s.stats.conns.Load(),
		Active:      s.active.Load(),
		Refused:     s.stats.refused.Load(),

		RefusedAddress: s.stats.refusedAddress.Load(),
		ReclaimedIdle:  s.stats.reclaimedIdle.Load(),
		ReclaimedSlow:  s.stats.reclaimedSlow.Load(),
		ReclaimedShare: s.stats.reclaimedShare.Load(),
		Retries:        s.stats.retries.Load(),
		ConnErrors:     map[string]int64{},
	}
	s.stats.mu.Lock()
	for k, v := range s.stats.errors {
		st.ConnErrors[k] = v
	}
	s.stats.mu.Unlock()
	return st
}

// acceptPumps is how many goroutines take finished handshakes off
// quic-go's queue (countingListener.Accept), and acceptQueue how many
// they hold for the server.
const (
	acceptPumps = 8
	acceptQueue = 1024
)

// pump moves accepted connections from quic-go's queue to pumped until
// the listener closes.
func (s *Server) pump() {
	for {
		c, err := s.ln.Accept(context.Background())
		if err != nil {
			s.pumpOnce.Do(func() {
				s.pumpErr = err
				close(s.pumpDone)
			})
			return
		}
		if h, ok := c.Context().Value(handshakeKey{}).(*handshake); ok {
			h.end()
		}
		select {
		case s.pumped <- c:
		default:
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "too many connections waiting")
		}
	}
}

// listener is a *quic.Listener, or a *quic.EarlyListener with 0-RTT.
type listener interface {
	Accept(context.Context) (*quic.Conn, error)
	Addr() net.Addr
	Close() error
}

// countingListener counts connections and, when each ends, why.
type countingListener struct{ s *Server }

func (l countingListener) Accept(ctx context.Context) (*quic.Conn, error) {
	s := l.s
	s.acceptOnce.Do(func() {
		// quic-go queues at most 32 finished handshakes for Accept and
		// refuses the next ones (CONNECTION_REFUSED): a burst of clients
		// coming back together (told to go away by a predecessor) can
		// finish more at once while one accepting goroutine waits for
		// its turn on a busy CPU. Several take them off quic-go's queue
		// into a deeper one.
		for range acceptPumps {
			go s.pump()
		}
		close(s.accepting)
	})
	var c *quic.Conn
	select {
	case c = <-s.pumped:
	case <-s.pumpDone:
		select {
		case c = <-s.pumped: // taken before the listener closed
		default:
			return nil, s.pumpErr
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.stats.conns.Add(1)
	s.active.Add(1)
	context.AfterFunc(c.Context(), func() {
		s.active.Add(-1)
		if code := closeCode(context.Cause(c.Context())); code != "" {
			s.stats.mu.Lock()
			s.stats.errors[code]++
			s.stats.mu.Unlock()
		}
	})
	return c, nil
}

func (l countingListener) Addr() net.Addr { return l.s.ln.Addr() }
func (l countingListener) Close() error   { return l.s.ln.Close() }

// closeCode names the error a connection ended with, or "" for a clean
// end (H3_NO_ERROR, NO_ERROR, idle timeout, server shutdown).
func closeCode(err error) string {
	side := func(remote bool) string {
		if remote {
			return "remote "
		}
		return "local "
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok {
		if ae.ErrorCode == quic.ApplicationErrorCode(http3.ErrCodeNoError) {
			return ""
		}
		name := http3.ErrCode(ae.ErrorCode).String()
		if !strings.HasPrefix(name, "H3_") {
			name = "other application error" // bounded: peers choose codes freely
		}
		return side(ae.Remote) + name
	}
	if te, ok := errors.AsType[*quic.TransportError](err); ok {
		if te.ErrorCode == quic.NoError {
			return ""
		}
		if te.ErrorCode.IsCryptoError() {
			return side(te.Remote) + "CRYPTO_ERROR" // one key for every TLS alert
		}
		name := te.ErrorCode.String()
		if strings.HasPrefix(name, "unknown") {
			name = "other transport error"
		}
		return side(te.Remote) + name
	}
	if _, ok := errors.AsType[*quic.HandshakeTimeoutError](err); ok {
		return "local handshake timeout"
	}
	if _, ok := errors.AsType[*quic.StatelessResetError](err); ok {
		return "remote stateless reset"
	}
	return ""
}
