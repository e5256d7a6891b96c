package wt

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// Codes the server closes sessions (and resets streams) with; the client
// sees them in CLOSE_WEBTRANSPORT_SESSION. docs/WEBTRANSPORT.md lists
// them for operators.
const (
	CodeDone             uint32 = 0     // closed by the client, or finished
	CodeIdle             uint32 = 0x100 // nothing moved for IdleTimeout
	CodeTooManyStreams   uint32 = 0x101 // more than MaxStreamsPerSession open
	CodeByteLimit        uint32 = 0x102 // MaxBytesPerSession moved
	CodeDatagramTooLarge uint32 = 0x103 // a datagram over MaxDatagramBytes
	CodeRefusedStream    uint32 = 0x104 // a stream the session does not use (stream resets)
	CodeShutdown         uint32 = 0x105 // the server is stopping
	CodeBadCapsule       uint32 = 0x106 // a malformed capsule on the CONNECT stream
	CodeSourceFailed     uint32 = 0x107 // the data to send could not be read, or changed
	CodeAborted          uint32 = 0x108 // (stream resets) the client reset the other side
	CodeFairShare        uint32 = 0x109 // closed at MaxSessions to admit a session of a client holding fewer
)

// Config bounds a Server's sessions. The zero value of each field means
// its documented default.
type Config struct {
	// MaxSessions bounds the sessions open at once, over all
	// connections. Zero means 64.
	MaxSessions int
	// MaxSessionsPerAddress bounds the sessions of one client address
	// (IPv6 by /64) open at once, so that one client cannot hold them
	// all. Zero means DefaultPerAddress(MaxSessions).
	MaxSessionsPerAddress int
	// MaxStreamsPerSession bounds the streams a client has open at once
	// in one session; one more closes the session (CodeTooManyStreams).
	// Zero means 16.
	MaxStreamsPerSession int
	// MaxDatagramBytes bounds a datagram's payload; a larger one closes
	// the session (CodeDatagramTooLarge). Zero means 1200.
	MaxDatagramBytes int
	// MaxBytesPerSession bounds what a session moves both ways (stream
	// and datagram payloads; the server sends no byte past it, and a
	// client's go over by at most one read); past it the session closes
	// (CodeByteLimit). Capsules are bounded apart, at 64 KiB a session.
	// Zero means 10 GiB.
	MaxBytesPerSession int64
	// IdleTimeout closes a session that moves nothing this long
	// (CodeIdle). Zero means 30 s.
	IdleTimeout time.Duration
	// HeaderTimeout bounds the wait for a stream's signal and session ID.
	// Zero means 10 s.
	HeaderTimeout time.Duration
	// OrphanWait is how long a stream naming a session the connection
	// does not have (yet) is held before it is refused. Zero means 1 s.
	OrphanWait time.Duration
	Logger     *slog.Logger
}

// Server keeps the WebTransport sessions of an HTTP/3 listener: it hands
// out session slots, binds the streams a connection opens to them, and
// ends them all on shutdown.
type Server struct {
	// Immutable after NewServer.
	cfg Config
	log *slog.Logger

	open atomic.Int64 // sessions open now; at most cfg.MaxSessions
	stat Stats        // counters (atomics)

	mu     sync.Mutex               // guards conns, draining and byAddr
	conns  map[*quic.Conn]*connSess // guarded by mu: connections with sessions or streams waiting
	drain  bool                     // guarded by mu: Drain was called
	byAddr map[netip.Prefix]int     // guarded by mu: sessions open by client address (IPv6 /64)
}

// Stats are a Server's counters.
type Stats struct {
	Sessions       atomic.Int64     `metric:"webtransport_sessions_total" help:"WebTransport sessions opened."`
	Refused        atomic.Int64     `metric:"webtransport_sessions_refused_total" help:"WebTransport sessions refused at max_sessions, at max_sessions_per_address, or during a stop (503, 429)."`
	RefusedAddress atomic.Int64     `metric:"webtransport_sessions_refused_address_total" help:"WebTransport sessions refused at max_sessions_per_address: their client address had its share open (429)."`
	ClosedForRoom  atomic.Int64     `metric:"webtransport_sessions_closed_for_room_total" help:"WebTransport sessions closed at max_sessions (0x109) to admit one of a client address holding fewer, or one idle 10 s of an address holding as many."`
	Streams        atomic.Int64     `metric:"webtransport_streams_total" help:"Client streams bound to a WebTransport session."`
	StreamsOrphan  atomic.Int64     `metric:"webtransport_streams_orphaned_total" help:"Client streams refused because their session was not found (WT_BUFFERED_STREAM_REJECTED)."`
	DatagramsIn    atomic.Int64     `metric:"webtransport_datagrams_received_total" help:"WebTransport datagrams received."`
	DatagramsOut   atomic.Int64     `metric:"webtransport_datagrams_sent_total" help:"WebTransport datagrams sent."`
	BytesIn        atomic.Int64     `metric:"webtransport_bytes_received_total" help:"WebTransport payload bytes received (streams, datagrams, capsules)."`
	BytesOut       atomic.Int64     `metric:"webtransport_bytes_sent_total" help:"WebTransport payload bytes sent (streams, datagrams)."`
	ClosedByClient atomic.Int64     // sessions the client ended (its capsule or FIN)
	ClosedAbruptly atomic.Int64     // CONNECT stream reset or connection gone
	ClosedByCode   [10]atomic.Int64 // server closes by code: [0] CodeDone and others, [1+code-0x100] for 0x100..0x108
}

// connSess is one connection's sessions, and the streams waiting for
// theirs.
type connSess struct {
	mu       sync.Mutex                 // guards all below
	sessions map[quic.StreamID]*Session // open sessions by ID
	waiting  int                        // streams waiting for a session
	changed  chan struct{}              // closed when sessions gains one
}

// maxOrphans bounds the streams of one connection that wait for their
// session at once; more are refused at once.
const maxOrphans = 16

// NewServer returns a Server with cfg's limits.
func NewServer(cfg Config) *Server {
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 64
	}
	if cfg.MaxSessionsPerAddress == 0 {
		cfg.MaxSessionsPerAddress = DefaultPerAddress(cfg.MaxSessions)
	}
	if cfg.MaxStreamsPerSession == 0 {
		cfg.MaxStreamsPerSession = 16
	}
	if cfg.MaxDatagramBytes == 0 {
		cfg.MaxDatagramBytes = 1200
	}
	if cfg.MaxBytesPerSession == 0 {
		cfg.MaxBytesPerSession = 10 << 30
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.OrphanWait == 0 {
		cfg.OrphanWait = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, log: cfg.Logger, conns: map[*quic.Conn]*connSess{}}
}

// Config returns the limits in force, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Stats returns the server's counters.
func (s *Server) Stats() *Stats { return &s.stat }

// Open returns the number of sessions open now.
func (s *Server) Open() int64 { return s.open.Load() }

// Settings returns the HTTP/3 SETTINGS that offer WebTransport, for
// http3.Server.AdditionalSettings; datagrams and extended CONNECT are
// quic-go's own.
func (s *Server) Settings() map[uint64]uint64 {
	n := uint64(s.cfg.MaxSessions)
	return map[uint64]uint64{
		settingWTEnabled:        1,
		settingWTMaxSessions:    n,
		settingEnableWTDraft02:  1,
		settingWTMaxSessionsD07: n,
	}
}

// ErrTooManySessions is Accept's answer at MaxSessions: the caller
// answers 503.
var ErrTooManySessions = errors.New("wt: too many sessions")

// DefaultPerAddress is the share of one client address when none is
// set: a quarter of n, at least 4 (all of n when it is smaller).
func DefaultPerAddress(n int) int { return max(min(n, 4), n/4) }

// ErrTooManyFromAddress is Accept's answer at MaxSessionsPerAddress for
// the client's address: nothing was sent.
var ErrTooManyFromAddress = errors.New("wt: too many sessions from this address")

// addrKey is the share a client address counts against: the address,
// or its /64 for IPv6.
func addrKey(a net.Addr) netip.Prefix {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.Prefix(64)
	return p
}

// errDraining refuses sessions once the server is stopping.
var errDraining = errors.New("wt: server is shutting down")

// Accept opens a session on the extended CONNECT request r, which the
// caller has checked (IsProtocol, path, origin) and which arrived on conn.
// It sends w's header with 200 and takes over the request stream. The
// session runs until one side closes it or a limit does; the caller uses
// it and must return from its handler only after Done is closed.
// ErrTooManySessions means MaxSessions are open: nothing was sent.
func (s *Server) Accept(conn *quic.Conn, w http.ResponseWriter, r *http.Request) (*Session, error) {
	if conn == nil {
		return nil, errors.New("wt: request without its QUIC connection")
	}
	hs, ok := w.(http3.HTTPStreamer)
	if !ok {
		return nil, errors.New("wt: not an HTTP/3 response")
	}
	s.mu.Lock()
	draining := s.drain
	s.mu.Unlock()
	if draining {
		s.stat.Refused.Add(1)
		return nil, errDraining
	}
	key := addrKey(conn.RemoteAddr())
	if !s.takeSlot(key) {
		s.stat.Refused.Add(1)
		return nil, ErrTooManySessions
	}
	s.mu.Lock()
	if s.byAddr[key] >= s.cfg.MaxSessionsPerAddress {
		s.mu.Unlock()
		s.open.Add(-1)
		s.stat.Refused.Add(1)
		s.stat.RefusedAddress.Add(1)
		return nil, ErrTooManyFromAddress
	}
	if s.byAddr == nil {
		s.byAddr = map[netip.Prefix]int{}
	}
	s.byAddr[key]++
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	str, err := hs.HTTPStream()
	if err != nil {
		s.open.Add(-1)
		s.leaveAddr(key)
		return nil, err
	}
	ss := newSession(s, conn, str, r)
	ss.addr = key
	draining = !s.register(ss)
	s.stat.Sessions.Add(1)
	go ss.readCapsules()
	if draining {
		// The server began to stop after the 200 went out: this
		// session is told so as the others were, and ends with them.
		go ss.sendDrain()
	}
	return ss, nil
}

// takeSlot counts a new session from the address counted under key in
// open, making room at MaxSessions (makeRoom), and reports whether it
// could.
func (s *Server) takeSlot(key netip.Prefix) bool {
	limit := int64(s.cfg.MaxSessions)
	if s.open.Add(1) <= limit {
		return true
	}
	s.open.Add(-1)
	if !s.makeRoom(key) {
		return false
	}
	if s.open.Add(1) <= limit {
		return true
	}
	s.open.Add(-1) // the slot made was taken by another first
	return false
}

// reclaimIdleAfter is how long a session must have moved nothing to be
// closed for a newcomer whose address holds as many sessions as its own.
const reclaimIdleAfter = 10 * time.Second

// makeRoom closes one session at MaxSessions for a newcomer from the
// address counted under key, and reports whether it did: the session
// that moved nothing for longest of the address holding the most, when
// that address holds more sessions than the newcomer's would (the fair
// share: a crowd holding every session gives way to a client holding
// fewer), or, failing that, a session idle past reclaimIdleAfter of an
// address holding as many. With more addresses than sessions, each
// holding one, only the idle ones make room.
func (s *Server) makeRoom(key netip.Prefix) bool {
	now := time.Now()
	s.mu.Lock()
	n := s.byAddr[key] + 1
	var victim *Session
	var vHeld int
	var vIdle time.Duration
	for _, cs := range s.conns {
		cs.mu.Lock()
		for _, ss := range cs.sessions {
			h := s.byAddr[ss.addr]
			idle := now.Sub(ss.start) - time.Duration(ss.lastMove.Load())
			if h < n || h == n && idle < reclaimIdleAfter {
				continue
			}
			if victim == nil || h > vHeld || h == vHeld && idle > vIdle {
				victim, vHeld, vIdle = ss, h, idle
			}
		}
		cs.mu.Unlock()
	}
	s.mu.Unlock()
	if victim == nil {
		return false
	}
	s.stat.ClosedForRoom.Add(1)
	victim.end(CodeFairShare, "closed at max_sessions to admit a session of a client holding fewer", false, false)
	return true
}

// leaveAddr ends a session's count against its client address.
func (s *Server) leaveAddr(key netip.Prefix) {
	s.mu.Lock()
	if s.byAddr[key]--; s.byAddr[key] <= 0 {
		delete(s.byAddr, key)
	}
	s.mu.Unlock()
}

// register adds ss to its connection's sessions and wakes the streams
// waiting for it. It reports false when the server is draining: the
// session is among those CloseAll ends all the same. The server's lock
// is held throughout, so that a drain lists every session registered
// before it and none registered after it misses that it is draining.
func (s *Server) register(ss *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	draining := s.drain
	cs := s.conns[ss.conn]
	if cs == nil {
		cs = &connSess{sessions: map[quic.StreamID]*Session{}, changed: make(chan struct{})}
		s.conns[ss.conn] = cs
		c := ss.conn
		context.AfterFunc(c.Context(), func() {
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		})
	}
	cs.mu.Lock()
	cs.sessions[ss.id] = ss
	close(cs.changed)
	cs.changed = make(chan struct{})
	cs.mu.Unlock()
	return !draining
}

// unregister removes an ended session.
func (s *Server) unregister(ss *Session) {
	s.mu.Lock()
	cs := s.conns[ss.conn]
	s.mu.Unlock()
	if cs != nil {
		cs.mu.Lock()
		if cs.sessions[ss.id] == ss {
			delete(cs.sessions, ss.id)
		}
		cs.mu.Unlock()
	}
}

// find returns conn's session id, waiting up to OrphanWait for it to be
// registered (a stream can overtake its session's CONNECT).
func (s *Server) find(conn *quic.Conn, id quic.StreamID) *Session {
	s.mu.Lock()
	cs := s.conns[conn]
	if cs == nil {
		// No session yet on this connection: make its table, so the
		// wait below is woken when the first one comes.
		cs = &connSess{sessions: map[quic.StreamID]*Session{}, changed: make(chan struct{})}
		s.conns[conn] = cs
		context.AfterFunc(conn.Context(), func() {
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		})
	}
	s.mu.Unlock()
	deadline := time.NewTimer(s.cfg.OrphanWait)
	defer deadline.Stop()
	cs.mu.Lock()
	if ss := cs.sessions[id]; ss != nil || cs.waiting >= maxOrphans {
		cs.mu.Unlock()
		return ss
	}
	cs.waiting++
	defer func() {
		cs.mu.Lock()
		cs.waiting--
		cs.mu.Unlock()
	}()
	for {
		ch := cs.changed
		cs.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		case <-conn.Context().Done():
			return nil
		}
		cs.mu.Lock()
		if ss := cs.sessions[id]; ss != nil {
			cs.mu.Unlock()
			return ss
		}
	}
}

// readHeader reads a stream's signal or type and session ID, within
// HeaderTimeout.
func (s *Server) readHeader(r quicvarint.Reader, setDeadline func(time.Time) error) (quic.StreamID, error) {
	setDeadline(time.Now().Add(s.cfg.HeaderTimeout))
	defer setDeadline(time.Time{})
	if _, err := quicvarint.Read(r); err != nil {
		return 0, err
	}
	id, err := quicvarint.Read(r)
	if err != nil {
		return 0, err
	}
	return quic.StreamID(id), nil
}

// HandleStream binds a client bidirectional stream that starts with
// BidiSignal to its session. It blocks until the stream is handed over
// or refused.
func (s *Server) HandleStream(conn *quic.Conn, str *quic.Stream) {
	id, err := s.readHeader(quicvarint.NewReader(str), str.SetReadDeadline)
	if err != nil {
		str.CancelRead(quic.StreamErrorCode(http3.ErrCodeGeneralProtocolError))
		str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeGeneralProtocolError))
		return
	}
	if !validSessionID(id) {
		// §4.2: a session ID that is not a client-initiated
		// bidirectional stream is H3_ID_ERROR.
		conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeIDError), "webtransport: invalid session ID")
		return
	}
	ss := s.find(conn, id)
	if ss == nil {
		s.stat.StreamsOrphan.Add(1)
		str.CancelRead(errBufferedStreamRejected)
		str.CancelWrite(errBufferedStreamRejected)
		return
	}
	ss.addStream(str)
}

// HandleUniStream binds a client unidirectional stream of type UniType to
// its session.
func (s *Server) HandleUniStream(conn *quic.Conn, str *quic.ReceiveStream) {
	id, err := s.readHeader(quicvarint.NewReader(str), str.SetReadDeadline)
	if err != nil {
		str.CancelRead(quic.StreamErrorCode(http3.ErrCodeGeneralProtocolError))
		return
	}
	if !validSessionID(id) {
		conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeIDError), "webtransport: invalid session ID")
		return
	}
	ss := s.find(conn, id)
	if ss == nil {
		s.stat.StreamsOrphan.Add(1)
		str.CancelRead(errBufferedStreamRejected)
		return
	}
	ss.addUniStream(str)
}

// validSessionID reports whether id can be a CONNECT stream: a
// client-initiated bidirectional stream.
func validSessionID(id quic.StreamID) bool { return id%4 == 0 }

// Drain tells every session the server is stopping
// (DRAIN_WEBTRANSPORT_SESSION) and refuses new ones.
func (s *Server) Drain() {
	var wg sync.WaitGroup
	for _, ss := range s.sessions(true) {
		wg.Go(ss.sendDrain)
	}
	wg.Wait()
}

// CloseAll ends every session with CodeShutdown and returns how many
// there were.
func (s *Server) CloseAll() int {
	all := s.sessions(true)
	var wg sync.WaitGroup
	for _, ss := range all {
		// At once: each may wait up to a second on a client that
		// reads nothing.
		wg.Go(func() { ss.end(CodeShutdown, "server is shutting down", false, false) })
	}
	wg.Wait()
	return len(all)
}

// sessions lists the open sessions; with drain it also stops new ones.
func (s *Server) sessions(drain bool) []*Session {
	s.mu.Lock()
	if drain {
		s.drain = true
	}
	var all []*Session
	for _, cs := range s.conns {
		cs.mu.Lock()
		for _, ss := range cs.sessions {
			all = append(all, ss)
		}
		cs.mu.Unlock()
	}
	s.mu.Unlock()
	return all
}
