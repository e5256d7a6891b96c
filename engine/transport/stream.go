package transport

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/internal/fileio"
	"github.com/mediaship/engine/ktls"
)

// Body is where a response body's bytes come from. The stream moves File
// and Mem bodies the cheapest way it has (sendfile, by reference, or read
// straight into a record); any other Body is copied through ReadAt.
type Body interface {
	// Len is the body's size in bytes.
	Len() int64
	// ReadAt fills bufs in order with the body's bytes from off and
	// returns how many it wrote. Fewer than asked is an error: the
	// response promised a length.
	ReadAt(bufs [][]byte, off int64) (int, error)
}

// File is a range of an open file. The descriptor stays open until the
// stream is no longer Busy.
type File struct {
	FD     int
	Off, N int64
	// Version, when not zero, is the file's version when its response
	// was promised: bytes read (checked after each read) or sent
	// (checked before each sendfile) once the file was rewritten in
	// place are refused with fileio.ErrChanged, and the response is cut
	// off.
	Version fileio.Version
}

func (f File) Len() int64 { return f.N }

func (f File) ReadAt(bufs [][]byte, off int64) (int, error) {
	n, err := fileio.Preadv(f.FD, bufs, f.Off+off)
	if n < iovLen(bufs) {
		err = errors.Join(fileio.ErrShrank, err) // or failed
	}
	if err == nil && f.Version.CtimeNs != 0 && fileio.Changed(f.FD, f.Version) {
		err = fileio.ErrChanged
	}
	return n, err
}

// Mem is body bytes in memory, sent by reference: the caller keeps them
// until the stream is no longer Busy.
type Mem []byte

func (m Mem) Len() int64 { return int64(len(m)) }

func (m Mem) ReadAt(bufs [][]byte, off int64) (int, error) {
	n := 0
	for _, b := range bufs {
		if off >= int64(len(m)) {
			break
		}
		k := copy(b, m[off:])
		n += k
		off += int64(k)
	}
	if n < iovLen(bufs) {
		return n, fileio.ErrShrank
	}
	return n, nil
}

func iovLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// Response is the stream's tally of one response: the body bytes it has
// carried in userspace TLS, which decide promotion. A driver keeps one per
// response in flight (HTTP/1.1: one per connection; HTTP/2: one per
// stream) and passes it with the response's body.
type Response struct {
	user int64
}

// Sink takes a Producer's output in wire order.
type Sink interface {
	// Write takes a copy of p (frame headers, response heads).
	Write(p []byte)
	// Body takes n bytes of b from off, as part of response r.
	Body(r *Response, b Body, off, n int64)
}

// Producer makes output on demand as the socket drains (HTTP/2 frames).
type Producer interface {
	// Produce gives s up to about budget bytes and returns how many it
	// gave; zero means it has nothing to send now, and the stream stops
	// asking until WriteFrom is called again.
	Produce(s Sink, budget int) int
	// Copied says every body byte produced so far has been copied out of
	// its Body (userspace TLS), so the bodies of finished responses may
	// be released before the stream is idle.
	Copied()
}

// Stats counts what the streams of a server did. Safe for concurrent use.
type Stats struct {
	Handshakes, HandshakeErrors, RecordErrors, AlertsReceived, KeyUpdates atomic.Int64
	UserBytes, KernelBytes, Promotions, PromoteFailures                   atomic.Int64
	// PlainBytes counts output of plain TCP streams (heads and bodies);
	// UserBytes and KernelBytes that of TLS streams, as plaintext.
	PlainBytes atomic.Int64
	// Resumed counts the Handshakes that resumed a session.
	Resumed atomic.Int64
	// UserBatches counts batches of records sealed in userspace: one
	// preadv (per file run) and one write each; UserBytes/UserBatches is
	// the plaintext per batch.
	UserBatches atomic.Int64
}

// Env is what a reactor loop's streams share.
type Env struct {
	// Immutable after construction.
	TLS           *tls.Config   // nil: streams are plain TCP
	HeaderTimeout time.Duration // bounds the TLS handshake (with the first request)
	InputSize     int           // plaintext input buffer of a TLS stream
	BatchSize     int           // plaintext sealed per write in userspace TLS
	SendBuffer    int           // producer output queued by reference ahead of the socket
	PromoteAfter  int64         // body bytes of a response sealed in userspace before promotion
	KernelTLS     bool          // kernel TLS works here: promote
	KernelRekey   bool          // and it can take a new key after promotion
	Stats         *Stats
	Log           *slog.Logger
	// Note logs a line about a client's misbehaviour, rate-limited.
	Note func(msg string, args ...any)

	// Owned by the loop goroutine.
	inBufs    [][]byte      // free plaintext input buffers
	batchBufs [][]byte      // free record batch buffers
	warned    bool          // a promotion failure was logged on this loop
	stepTimer *time.Timer   // bounds a wait for a handshake step (awaitStep)
	awaitFrom time.Time     // the window awaited counts in
	awaited   time.Duration // spent waiting for handshake steps since awaitFrom
}

// maxFreeBufs bounds the idle buffers a loop keeps.
const maxFreeBufs = 64

func (e *Env) getIn() []byte {
	if n := len(e.inBufs); n > 0 {
		b := e.inBufs[n-1]
		e.inBufs = e.inBufs[:n-1]
		return b
	}
	return make([]byte, e.InputSize)
}

func (e *Env) putIn(b []byte) {
	if b != nil && len(e.inBufs) < maxFreeBufs {
		e.inBufs = append(e.inBufs, b)
	}
}

func (e *Env) getBatch(size int) []byte {
	if n := len(e.batchBufs); n > 0 {
		b := e.batchBufs[n-1]
		e.batchBufs = e.batchBufs[:n-1]
		if cap(b) >= size {
			return b[:0]
		}
	}
	return make([]byte, 0, size)
}

func (e *Env) putBatch(b []byte) {
	if b != nil && len(e.batchBufs) < maxFreeBufs {
		e.batchBufs = append(e.batchBufs, b[:0])
	}
}

// Stream is one connection's plaintext byte stream.
type Stream struct {
	// Immutable after Open.
	env *Env
	c   *reactor.Conn

	// Owned by the loop goroutine.
	closing bool     // CloseGracefully called: nothing more goes out
	prod    Producer // has output to give; nil when it said it has none
	sent    int64    // plaintext handed towards the socket (TLS)

	tls *tlsState // nil on plain TCP
}

// Open makes the stream of a new connection: TLS when env has a TLS
// config (the handshake starts with the first record), plain otherwise.
func (e *Env) Open(c *reactor.Conn) *Stream {
	s := &Stream{env: e, c: c}
	if e.TLS != nil {
		s.tls = &tlsState{}
		s.tls.out.s = s
	}
	return s
}

// Closed releases what the stream holds once its connection is gone.
func (s *Stream) Closed() {
	if t := s.tls; t != nil {
		if t.hs != nil {
			t.hs.Abort()
			t.hs = nil
		}
		s.env.putIn(t.in)
		t.in = nil
	}
	s.prod = nil
}

// Advance reads what the socket delivered: handshake records, then
// records decrypted into the plaintext input. It returns false when the
// stream ended the connection.
func (s *Stream) Advance() bool {
	if s.tls == nil {
		return true
	}
	return s.advanceTLS()
}

// Ready reports whether the stream carries application data (the TLS
// handshake is done).
func (s *Stream) Ready() bool { return s.tls == nil || s.tls.phase == phaseOpen }

// Session is the TLS handshake's outcome; nil on plain TCP.
func (s *Stream) Session() *ktls.Session {
	if s.tls == nil {
		return nil
	}
	return s.tls.sess
}

// Input is plaintext received and not yet consumed.
func (s *Stream) Input() []byte {
	if s.tls == nil {
		return s.c.Input()
	}
	return s.tls.input()
}

// Consume drops the first n bytes of Input.
func (s *Stream) Consume(n int) {
	if s.tls == nil {
		s.c.Consume(n)
		return
	}
	s.tls.consume(s.env, n)
}

// EOF reports whether the peer has finished sending.
func (s *Stream) EOF() bool {
	if s.tls == nil {
		return s.c.EOF()
	}
	return s.tls.peerDone
}

// End closes a connection whose peer has finished sending and whose
// driver has nothing more to say: on TLS after answering the peer's
// close_notify with ours (RFC 8446 §6.1), at once otherwise.
func (s *Stream) End() {
	if s.closing {
		return // a graceful close is under way: let it finish
	}
	if t := s.tls; t != nil && t.closeNotified && t.phase == phaseOpen {
		s.CloseGracefully()
		return
	}
	s.c.Close()
}

// Retiring reports that the connection should end after the responses in
// progress: its TLS key has protected half the records it safely can (RFC
// 8446 §5.5), or the client asked for a key change this kernel cannot do.
func (s *Stream) Retiring() bool {
	t := s.tls
	return t != nil && (t.retire || t.seal != nil && t.seal.Seq()+t.kernelRecords > recordBudget)
}

// recordBudget is the records a write key may protect before the
// connection retires: half the 2^24 bound the record layer enforces.
const recordBudget = 1 << 23

// StartResponse begins response r: its body count starts from zero.
func (s *Stream) StartResponse(r *Response) { r.user = 0 }

// direct reports whether output goes straight to the reactor: plain TCP,
// or kernel TLS with nothing queued before it.
func (s *Stream) direct() bool {
	return s.tls == nil || s.tls.promoted && len(s.tls.queue) == 0
}

// Write queues a copy of p.
func (s *Stream) Write(p []byte) {
	switch {
	case s.closing || len(p) == 0:
	case s.direct():
		s.c.Write(p)
		s.kernelSent(int64(len(p)))
	default:
		s.tls.write(p)
	}
}

// WriteBodyBytes queues a copy of p as body bytes of response r: like
// Write, and counted toward promote_after like WriteBody (a proxied body,
// whose bytes arrive in pieces from an upstream).
func (s *Stream) WriteBodyBytes(r *Response, p []byte) {
	promoted := s.tls == nil || s.tls.promoted
	s.Write(p)
	if !promoted && !s.closing {
		// Counted when queued: the promotion itself waits for every
		// record sealed before it to reach the socket.
		s.userBody(r, int64(len(p)))
	}
}

// SpliceFrom queues n body bytes read straight from src's socket (a
// proxied body's upstream, on the same loop) by splice(2), when output
// goes straight to the kernel: plain TCP, or kernel TLS with nothing
// queued before it. It reports false, queueing nothing, otherwise.
func (s *Stream) SpliceFrom(src *reactor.Conn, n int64) bool {
	if s.closing || !s.direct() {
		return false
	}
	s.c.Splice(src, n)
	s.kernelSent(n)
	return true
}

// WriteBody queues body b of response r. File and Mem bodies are held by
// reference until the stream is no longer Busy.
func (s *Stream) WriteBody(r *Response, b Body) {
	n := b.Len()
	switch {
	case s.closing || n == 0:
	case s.direct():
		s.sendBody(b, 0, n)
	default:
		s.tls.queue = append(s.tls.queue, part{resp: r, body: b, n: n})
	}
}

// WriteFrom asks p for output as the socket drains, until it has none.
func (s *Stream) WriteFrom(p Producer) {
	if !s.closing {
		s.prod = p
	}
}

// Busy reports whether queued output has not all reached the socket.
func (s *Stream) Busy() bool {
	return s.c.Pending() || s.tls != nil && len(s.tls.queue) > 0
}

// Sent is the plaintext written so far, for the access log.
func (s *Stream) Sent() int64 {
	if s.tls == nil {
		return s.c.Sent()
	}
	return s.sent
}

// CloseGracefully ends the connection after the queued output (with a
// close_notify alert on TLS).
func (s *Stream) CloseGracefully() {
	if s.closing {
		return
	}
	s.closing = true
	s.prod = nil
	if s.tls == nil {
		s.c.CloseAfterFlush()
		return
	}
	s.tls.queue = append(s.tls.queue, part{mark: markClose})
	s.Pump()
}

// Pump moves output towards the socket: the driver calls it before Busy.
// Nothing moves while the reactor still holds earlier output, so records
// stay in order and a Producer fills only as fast as the socket drains.
func (s *Stream) Pump() {
	if s.c.Pending() || !s.Ready() {
		return
	}
	if s.tls != nil && !s.tls.promoted {
		s.pumpUser()
		return
	}
	if s.tls != nil {
		s.pumpKernel()
		if s.c.Pending() || len(s.tls.queue) > 0 {
			return
		}
	}
	if s.prod != nil {
		budget := s.env.SendBuffer
		for budget > 0 {
			n := s.prod.Produce(directSink{s}, budget)
			if n == 0 {
				s.prod = nil
				break
			}
			budget -= n
		}
	}
}

// directSink passes a Producer's output straight to the reactor.
type directSink struct{ s *Stream }

func (d directSink) Write(p []byte) {
	d.s.c.Write(p)
	d.s.kernelSent(int64(len(p)))
}

func (d directSink) Body(_ *Response, b Body, off, n int64) { d.s.sendBody(b, off, n) }

// sendBody queues n bytes of b from off on the reactor: a file range by
// sendfile, memory by reference, anything else copied by a reader source.
func (s *Stream) sendBody(b Body, off, n int64) {
	switch b := b.(type) {
	case File:
		s.c.SendFile(b.FD, b.Off+off, n, b.Version)
	case Mem:
		s.c.WriteRef(b[off : off+n])
	default:
		s.c.WriteSource(&readSource{b: b, off: off, end: off + n})
	}
	s.kernelSent(n)
}

// kernelSent counts bytes the kernel sends: plain, or sealed by kernel
// TLS.
func (s *Stream) kernelSent(n int64) {
	t := s.tls
	if t == nil {
		s.env.Stats.PlainBytes.Add(n)
		return
	}
	s.sent += n
	t.kernelRecords += uint64((n + ktls.MaxPlaintext - 1) / ktls.MaxPlaintext)
	s.env.Stats.KernelBytes.Add(n)
}

// KernelTLS reports whether the kernel seals this stream's output now.
func (s *Stream) KernelTLS() bool { return s.tls != nil && s.tls.promoted }

// readSource copies a Body that has no faster way out through a buffer.
type readSource struct {
	b        Body
	off, end int64
	buf      []byte
	iov      [1][]byte
}

func (r *readSource) Next(room int) ([]byte, error) {
	if r.off >= r.end {
		return nil, nil
	}
	if r.buf == nil {
		r.buf = make([]byte, 64<<10)
	}
	k := int(min(int64(len(r.buf)), int64(max(room, 1)), r.end-r.off))
	r.iov[0] = r.buf[:k]
	n, err := r.b.ReadAt(r.iov[:], r.off)
	if err != nil {
		return nil, err
	}
	r.off += int64(n)
	return r.buf[:n], nil
}

func (r *readSource) Release() { r.buf = nil }
