package ktls

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Session is what a finished handshake leaves for the record layer.
type Session struct {
	Version    uint16 // tls.VersionTLS13
	Suite      Suite
	ALPN       string
	ServerName string
	Resumed    bool

	// Read protects client-to-server records, Write server-to-client. The
	// secrets are kept for KeyUpdate.
	Read, Write             Keys
	ReadSecret, WriteSecret []byte
	// WriteSeq is the sequence number of the server's next record: the
	// handshake may already have written records under the application
	// key (NewSessionTicket), found by decrypting what it wrote. ReadSeq
	// is the client's next: 0 in TLS 1.3, 1 in TLS 1.2 (its Finished used
	// the key already).
	WriteSeq, ReadSeq uint64
}

// HandshakeIO is how the handshake goroutine reaches its connection. Its
// methods are called from that goroutine and must not block on the
// reactor; they hand work over (Loop.Post). Output is handed over only
// when the handshake is about to wait for the client (Want) or has ended
// (Done), so a whole flight costs the reactor one wake-up.
type HandshakeIO interface {
	// Want sends out, the handshake's output since the last call (maybe
	// empty), to the client, and asks for the next record from the
	// client: the handshake has used everything it was given. out is the
	// callee's to keep, unchanged.
	Want(out []byte)
	// Done sends out like Want, then reports the end of the handshake,
	// once. A failed handshake's alert is in out.
	Done(out []byte, s *Session, err error)
}

// Handshake drives a crypto/tls server handshake that crypto/tls believes
// runs over a net.Conn, while the bytes really come from the reactor one
// record at a time, so it never reads past the record that ends the
// handshake: what follows is application data for our record layer.
type Handshake struct {
	// Immutable after construction.
	io     HandshakeIO
	config *tls.Config // from ServerConfig
	keys   keyLog      // filled by the per-connection clone's KeyLogWriter
	local  net.Addr
	remote net.Addr

	in      chan []byte // records from the reactor; closed to abort
	abort   sync.Once   // closes in once: Abort may be called again (a timeout, a failed Feed)
	first   []byte      // the record the handshake starts with
	written []byte      // everything the handshake wrote, owned by the goroutine
	flushed int         // written[:flushed] has been handed to Want or Done

	// A step's end goes to a caller in Await through step, instead of
	// through io, when stepWait is 1 as the step ends: the first to swap
	// it to 0, the goroutine or Await giving up, decides which way. Only
	// a handshake started by StartAwaited sets it (immutable awaited).
	awaited  bool
	stepWait atomic.Int32
	step     chan Step
}

// Step is how a handshake step ended: its output for the client, and a
// request for the next record, or the end of the handshake (Done).
type Step struct {
	Out     []byte
	Done    bool
	Session *Session
	Err     error
}

// ServerConfig prepares a server's tls.Config for handshakes run by
// StartHandshake: every connection gets a clone with its own key log (that
// is where the record layer's keys come from), while session ticket keys
// stay those of the returned config, shared by all connections so tickets
// resume anywhere. A GetConfigForClient on base still chooses the config
// (SNI); it must not set a KeyLogWriter.
func ServerConfig(base *tls.Config) *tls.Config {
	shared := base.Clone()
	choose := base.GetConfigForClient
	shared.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		hc, ok := hello.Conn.(*hsConn)
		if !ok {
			return nil, errors.New("ktls: handshake not started by StartHandshake")
		}
		var c *tls.Config
		if choose != nil {
			var err error
			if c, err = choose(hello); err != nil {
				return nil, err
			}
		}
		if c == nil {
			c = base
		}
		c = c.Clone()
		c.GetConfigForClient = nil
		c.KeyLogWriter = &hc.h.keys
		return c, nil
	}
	return shared
}

// StartHandshake starts the handshake goroutine with a config made by
// ServerConfig, and the client's first record (the ClientHello, or its
// first part), which becomes the goroutine's.
func StartHandshake(config *tls.Config, io HandshakeIO, local, remote net.Addr, first []byte) *Handshake {
	return start(config, io, local, remote, first, false)
}

// StartAwaited is StartHandshake for a caller that follows it, and every
// Feed, with Await.
func StartAwaited(config *tls.Config, io HandshakeIO, local, remote net.Addr, first []byte) *Handshake {
	return start(config, io, local, remote, first, true)
}

func start(config *tls.Config, io HandshakeIO, local, remote net.Addr, first []byte, awaited bool) *Handshake {
	h := &Handshake{io: io, config: config, local: local, remote: remote, in: make(chan []byte, 1), first: first,
		awaited: awaited, step: make(chan Step, 1)}
	if awaited {
		h.stepWait.Store(1) // before the goroutine can end its first step
	}
	go h.run()
	return h
}

// Await waits for the step that StartHandshake or the last Feed began,
// until timer fires, and returns how it ended (ok). The caller parks,
// so the handshake goroutine it has just made runnable runs next on the
// caller's thread and its end comes back the same way: no other thread
// is woken and no HandshakeIO hand-off (a Post, an eventfd write and a
// wake-up of the loop) is made. With timer nil it does not wait. When ok
// is false the step's end comes through HandshakeIO, as without Await.
func (h *Handshake) Await(timer *time.Timer) (Step, bool) {
	if timer != nil {
		select {
		case s := <-h.step:
			return s, true
		case <-timer.C:
		}
	}
	if h.stepWait.CompareAndSwap(1, 0) {
		return Step{}, false
	}
	return <-h.step, true // it ended meanwhile: it is on its way
}

// want and done end a step: to Await's caller when it still waits, else
// through io.
func (h *Handshake) want(out []byte) {
	if h.stepWait.CompareAndSwap(1, 0) {
		h.step <- Step{Out: out}
		return
	}
	h.io.Want(out)
}

func (h *Handshake) done(out []byte, s *Session, err error) {
	if h.stepWait.CompareAndSwap(1, 0) {
		h.step <- Step{Out: out, Done: true, Session: s, Err: err}
		return
	}
	h.io.Done(out, s, err)
}

// Feed hands the handshake the next record, after a Want. It never
// blocks: there is at most one outstanding Want.
func (h *Handshake) Feed(record []byte) {
	if h.awaited {
		h.stepWait.Store(1)
	}
	select {
	case h.in <- record:
	default:
		// A Feed without a Want is a caller bug; dropping would hang the
		// handshake, so fail it.
		h.Abort()
	}
}

// Abort ends the handshake: the client went away or timed out.
func (h *Handshake) Abort() { h.abort.Do(func() { close(h.in) }) }

func (h *Handshake) run() {
	growStack(0)
	conn := &hsConn{h: h, cur: h.first}
	h.first = nil
	tc := tls.Server(conn, h.config)
	// The reactor's timeouts end a stalled handshake by calling Abort.
	err := tc.HandshakeContext(context.Background())
	if err != nil {
		h.done(h.unflushed(), nil, err)
		return
	}
	s, err := h.session(tc.ConnectionState())
	h.done(h.unflushed(), s, err)
}

// growStack grows a new goroutine's stack, while it is still shallow, to
// about what crypto/tls's server handshake needs, so that the stack is
// copied once here instead of several times from deep inside the
// handshake, where each copy walks every frame (3% of the server's CPU
// under new-connection load, in perf).
//
//go:noinline
func growStack(i int) byte {
	var frame [stackFrame]byte
	frame[i] = 1
	return frame[(i+1)%stackFrame]
}

const stackFrame = 16 << 10

// unflushed returns what the handshake wrote since the last call. The
// slice is capped, so later writes never touch it.
func (h *Handshake) unflushed() []byte {
	out := h.written[h.flushed:len(h.written):len(h.written)]
	h.flushed = len(h.written)
	return out
}

// session builds the record layer's keys from the key log and finds the
// server's next sequence number.
func (h *Handshake) session(cs tls.ConnectionState) (*Session, error) {
	suite, ok := SuiteByID(cs.CipherSuite)
	if !ok || suite.v12 != (cs.Version == tls.VersionTLS12) || (cs.Version != tls.VersionTLS12 && cs.Version != tls.VersionTLS13) {
		return nil, fmt.Errorf("ktls: TLS %#x with cipher suite %#x has no record layer here", cs.Version, cs.CipherSuite)
	}
	s := &Session{Version: cs.Version, Suite: suite, ALPN: cs.NegotiatedProtocol, ServerName: cs.ServerName, Resumed: cs.DidResume}
	if cs.Version == tls.VersionTLS12 {
		return h.session12(s)
	}
	s.ReadSecret = h.keys.get("CLIENT_TRAFFIC_SECRET_0")
	s.WriteSecret = h.keys.get("SERVER_TRAFFIC_SECRET_0")
	if s.ReadSecret == nil || s.WriteSecret == nil {
		return nil, errNoSecret
	}
	var err error
	if s.Read, err = TrafficKeys(suite, s.ReadSecret); err != nil {
		return nil, err
	}
	if s.Write, err = TrafficKeys(suite, s.WriteSecret); err != nil {
		return nil, err
	}
	if s.WriteSeq, err = countRecords(s.Write, h.written); err != nil {
		return nil, err
	}
	return s, nil
}

// session12 derives TLS 1.2 keys from the master secret in the key log,
// the client random beside it and the server random in our ServerHello.
// The server has written one record under its key (Finished), the client
// one too. Resumed 1.2 sessions log no keys, which is why tickets are off
// for 1.2.
func (h *Handshake) session12(s *Session) (*Session, error) {
	master := h.keys.get("CLIENT_RANDOM")
	if master == nil || s.Resumed {
		return nil, errNoSecret
	}
	serverRandom, afterCCS, err := scan12(h.written)
	if err != nil {
		return nil, err
	}
	if s.Read, s.Write, err = keys12(s.Suite, master, h.keys.random(), serverRandom); err != nil {
		return nil, err
	}
	s.WriteSeq, s.ReadSeq = afterCCS, 1
	return s, nil
}

// scan12 finds the server random in the ServerHello and counts the
// records written after ChangeCipherSpec (under the new key).
func scan12(wire []byte) (serverRandom []byte, afterCCS uint64, err error) {
	ccs := false
	for len(wire) >= 5 {
		size := 5 + int(binary.BigEndian.Uint16(wire[3:5]))
		if size > len(wire) {
			return nil, 0, errors.New("ktls: handshake output ends in a partial record")
		}
		rec := wire[5:size]
		switch {
		case ccs:
			afterCCS++
		case wire[0] == 20:
			ccs = true
		case wire[0] == RecordHandshake && serverRandom == nil && len(rec) >= 4+2+32 && rec[0] == 2:
			serverRandom = rec[4+2 : 4+2+32]
		}
		wire = wire[size:]
	}
	if serverRandom == nil {
		return nil, 0, errors.New("ktls: no ServerHello in the handshake output")
	}
	return serverRandom, afterCCS, nil
}

// countRecords returns how many of the encrypted records in wire are
// protected by k: those come last (after the handshake-key records), at
// sequence numbers 0, 1, ...
func countRecords(k Keys, wire []byte) (uint64, error) {
	// One opener for all: a record that does not decrypt leaves its
	// sequence number where it was.
	o, err := NewOpener(k, 0)
	if err != nil {
		return 0, err
	}
	var n uint64
	for len(wire) >= 5 {
		size := 5 + int(binary.BigEndian.Uint16(wire[3:5]))
		if size > len(wire) {
			return 0, errors.New("ktls: handshake output ends in a partial record")
		}
		rec := wire[:size]
		wire = wire[size:]
		if rec[0] != RecordApplicationData {
			continue // ServerHello, ChangeCipherSpec: plaintext
		}
		if r, err := o.Open(rec); err == nil && r != nil {
			n++
		} else if n > 0 {
			return 0, errors.New("ktls: a record after the first application-key record does not decrypt with it")
		}
	}
	return n, nil
}

// hsConn is the net.Conn crypto/tls sees.
type hsConn struct {
	h   *Handshake
	cur []byte
}

func (c *hsConn) Read(p []byte) (int, error) {
	if len(c.cur) == 0 {
		c.h.want(c.h.unflushed())
		rec, ok := <-c.h.in
		if !ok {
			return 0, io.EOF
		}
		c.cur = rec
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// Write keeps p for the next Want or Done: crypto/tls writes a flight in
// several calls and then waits for the client, or ends.
func (c *hsConn) Write(p []byte) (int, error) {
	c.h.written = append(c.h.written, p...)
	return len(p), nil
}

func (c *hsConn) Close() error                     { return nil }
func (c *hsConn) LocalAddr() net.Addr              { return c.h.local }
func (c *hsConn) RemoteAddr() net.Addr             { return c.h.remote }
func (c *hsConn) SetDeadline(time.Time) error      { return nil }
func (c *hsConn) SetReadDeadline(time.Time) error  { return nil }
func (c *hsConn) SetWriteDeadline(time.Time) error { return nil }

// RecordLen returns the length of the TLS record at the start of b, or 0
// when b does not yet hold its header. It does not check the content.
func RecordLen(b []byte) int {
	if len(b) < 5 {
		return 0
	}
	return 5 + int(binary.BigEndian.Uint16(b[3:5]))
}
