package h2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Preface is what a client sends first (RFC 9113 §3.4).
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Error codes (RFC 9113 §7), as x/net names them.
type ErrCode = http2.ErrCode

// Config bounds one connection. The zero value of each field means its
// default.
type Config struct {
	// MaxConcurrentStreams is advertised in SETTINGS and enforced: a
	// stream past it is refused (REFUSED_STREAM). Streams the client
	// reset while their request is still being worked on count too, so
	// opening and resetting streams cannot pile up work (CVE-2023-44487).
	// Zero means 128.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a request's decoded header list, counted
	// as RFC 9113 §6.5.2 says (name + value + 32 per field); past it the
	// request is answered 431. The encoded block may be at most four
	// times this, in at most 32 frames, or the connection ends with
	// ENHANCE_YOUR_CALM (the CONTINUATION flood, CVE-2024-27316). Zero
	// means 16 KiB.
	MaxHeaderListSize uint32
	// ConnWindow is the connection-level receive window for request
	// bodies. Zero means 1 MiB.
	ConnWindow uint32
	// StreamWindow is each stream's receive window (SETTINGS_INITIAL_
	// WINDOW_SIZE). Request bodies are not read by this server, so it
	// only bounds what a client may send unasked. Zero means 64 KiB.
	StreamWindow uint32
	// MaxQueuedControl bounds control output (SETTINGS and PING
	// acknowledgements, RST_STREAM) waiting for a client that does not
	// read; past it the connection ends with ENHANCE_YOUR_CALM. Zero
	// means 256 KiB.
	MaxQueuedControl int
	// OnEvent, when set, is told of every limit hit and protocol error,
	// for counting and logging.
	OnEvent func(Event, error)
}

func (c *Config) withDefaults() {
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 128
	}
	if c.MaxHeaderListSize == 0 {
		c.MaxHeaderListSize = 16 << 10
	}
	if c.ConnWindow == 0 {
		c.ConnWindow = 1 << 20
	}
	if c.StreamWindow == 0 {
		c.StreamWindow = 64 << 10
	}
	if c.MaxQueuedControl == 0 {
		c.MaxQueuedControl = 256 << 10
	}
}

// Event names what happened, for counters.
type Event uint8

const (
	EventProtocolError     Event = iota // the peer broke the protocol: GOAWAY or RST_STREAM with the RFC's code
	EventCompressionError               // an undecodable header block: GOAWAY COMPRESSION_ERROR
	EventRefused                        // a stream past the concurrency limit: REFUSED_STREAM
	EventHeaderTooLarge                 // a header list past MaxHeaderListSize: 431
	EventContinuationFlood              // a header block too long or in too many frames
	EventControlFlood                   // too many SETTINGS, PING, PRIORITY, WINDOW_UPDATE or empty frames
	EventRapidReset                     // too many streams reset by the client
	EventQueueFlood                     // control output piling up unread
	EventStall                          // a zero window held past the stall timeout
	EventMalformed                      // a malformed request: RST_STREAM PROTOCOL_ERROR
	EventHeaderTimeout                  // a header block left unfinished past the header timeout
)

var eventNames = [...]string{"protocol error", "compression error", "refused stream", "header list too large",
	"CONTINUATION flood", "control frame flood", "rapid reset", "control queue flood", "flow-control stall", "malformed request", "header block timeout"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("event %d", e)
}

// ConnError ends the connection: GOAWAY with Code has been queued.
type ConnError struct {
	Code   ErrCode
	Reason string
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("h2: connection error %v: %s", e.Code, e.Reason)
}

// Handler receives a connection's requests. Its methods run on the
// goroutine that calls Feed, Produce and Expire.
type Handler interface {
	// Request is called when a stream's request head is complete. The
	// handler answers with Conn.Respond, now or later.
	Request(st *Stream)
	// StreamDone is called once when a stream ends: its response was
	// produced to the end, or it was reset by either side (st.ResetCode
	// says which; also for streams never answered). Nothing more will be
	// asked of its body after this.
	StreamDone(st *Stream)
}

// BodyHandler is a Handler that reads request bodies. Body is called for
// each DATA frame of a stream after its Request (p is valid only during
// the call; end is END_STREAM), and with end set when trailers end the
// request. The stream's receive window opens again only as the handler
// calls Consumed, so a client sends no faster than the handler passes
// the bytes on. Without it, request bodies are discarded unread.
type BodyHandler interface {
	Body(st *Stream, p []byte, end bool)
}

// Sink takes a connection's output, in order.
type Sink interface {
	// Bytes takes frame bytes to send as they are; p is only valid during
	// the call. A frame may be split over calls.
	Bytes(p []byte)
	// Data takes a DATA frame: its 9-byte header (valid during the call)
	// followed by n bytes of st's response body from offset off. It
	// returns false, having taken nothing, when the body cannot give those
	// bytes (its file shrank): the stream is then reset with
	// INTERNAL_ERROR, and the connection's other streams go on.
	Data(st *Stream, header []byte, off int64, n int) bool
}

// Stream is one request and its response.
type Stream struct {
	ID       uint32
	Req      Request
	Priority Priority
	// Trailers are the request's trailer fields (checked as header fields
	// are, no pseudo-headers), once a HEADERS frame ended the body.
	Trailers []Field
	// ResetCode is the code the stream was reset with, once StreamDone
	// reports a reset; zero for a completed response.
	ResetCode ErrCode
	Reset     bool
	// User is the handler's state for the stream.
	User any

	// Owned by the Conn.
	conn       *Conn
	remoteDone bool  // END_STREAM received
	responded  bool  // head queued
	localDone  bool  // END_STREAM produced
	done       bool  // StreamDone called
	busy       bool  // the handler is working on it (MarkBusy)
	localAt    int64 // when the response ended, for a request that has not
	sendWindow int64 // may go negative after a SETTINGS change
	recvWindow int64
	bodyLen    int64               // -1: streamed (BodyReady, EndBody)
	avail      int64               // streamed: body bytes the handler has ready, from 0
	ended      bool                // streamed: EndBody called
	trailers   []hpack.HeaderField // streamed: sent as a HEADERS frame after the body
	sent       int64
	bodyRecv   int64
	blocked    int64 // monotonic ns since the stream waits on a window; 0 when not
	markSent   int64 // sent when blocked was set: progress since is judged against it
	served     uint64
	arena      []byte // request field bytes
}

// left is how many body bytes Produce can send now.
func (st *Stream) left() int64 {
	if st.bodyLen < 0 {
		return st.avail - st.sent
	}
	return st.bodyLen - st.sent
}

// final reports whether the body's end is known: a length, or EndBody.
func (st *Stream) final() bool { return st.bodyLen >= 0 || st.ended }

// RemoteDone reports whether the request is complete (END_STREAM
// received): no body, or all of it.
func (st *Stream) RemoteDone() bool { return st.remoteDone }

// Sent returns how many body bytes have been produced.
func (st *Stream) Sent() int64 { return st.sent }

// BodyLen returns the response body length given to Respond.
func (st *Stream) BodyLen() int64 { return st.bodyLen }

// Conn is the server side of one HTTP/2 connection.
type Conn struct {
	// Immutable after construction.
	cfg Config
	h   Handler

	// Owned by the connection's goroutine.
	fr        *http2.Framer
	rd        frameReader
	ctrl      []byte // output waiting for Produce
	dec       *hpack.Decoder
	enc       *hpack.Encoder
	encBuf    bytes.Buffer
	preface   bool // the client preface has arrived
	settings  bool // the client's first SETTINGS has arrived
	dead      bool // a connection error: input is ignored
	goAway    bool // GOAWAY sent: no new streams
	peerAway  bool // the client sent GOAWAY
	streams   map[uint32]*Stream
	sending   []*Stream // streams with a response body left
	zombies   int       // streams reset while the handler still works on them
	maxID     uint32    // highest stream the client opened
	reset     [64]uint32
	resetN    int
	pending   map[uint32]Priority // PRIORITY_UPDATE for streams not open yet
	serveSeq  uint64
	sendWin   int64 // connection send window
	recvWin   int64 // connection receive window left
	recvTaken int64 // received since the last WINDOW_UPDATE
	peerMax   int   // SETTINGS_MAX_FRAME_SIZE of the client
	peerInit  int64 // SETTINGS_INITIAL_WINDOW_SIZE of the client
	now       int64
	connBlock int64 // since when responses wait without progress; 0 when not
	connSent  int64 // DATA payload bytes produced on the connection
	connMark  int64 // connSent when connBlock was set

	// The header block being received.
	hdr struct {
		st       *Stream // nil when the block is decoded only for HPACK's sake
		id       uint32
		end      bool // END_STREAM on the HEADERS
		trailers bool
		frames   int
		bytes    int
		size     uint32 // decoded list size
		tooLarge bool
		bad      error // first malformation
		pseudoOK bool  // still in the pseudo-header section
		fields   []Field
		at       int64 // when its HEADERS frame arrived
	}

	// Flood accounting: token buckets refilled with time.
	ctrlTokens  float64
	resetTokens float64
	lastRefill  int64
	// WINDOW_UPDATE frames received, and DATA frames sent: a client
	// credits what it was sent, so the first may not outrun the second
	// (windowUpdateCost).
	windowUpdates, dataSent int64
}

// Limits of the flood buckets: a burst, and a refill per second.
const (
	ctrlBurst, ctrlPerSec   = 1000, 200
	resetBurst, resetPerSec = 256, 64
	maxHeaderFrames         = 32
	maxReadFrame            = 16384 // we never raise SETTINGS_MAX_FRAME_SIZE
	maxWindow               = 1<<31 - 1
	pendingPriorities       = 256
)

// NewConn starts a server connection; its SETTINGS are queued at once.
func NewConn(cfg Config, h Handler) *Conn {
	cfg.withDefaults()
	c := &Conn{cfg: cfg, h: h, streams: map[uint32]*Stream{}, sendWin: 65535, recvWin: 65535,
		peerMax: 16384, peerInit: 65535, ctrlTokens: ctrlBurst, resetTokens: resetBurst}
	c.fr = http2.NewFramer(ctrlWriter{c}, &c.rd)
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(int(cfg.MaxHeaderListSize))
	c.enc = hpack.NewEncoder(&c.encBuf)
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: cfg.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: cfg.StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: cfg.MaxHeaderListSize},
		http2.Setting{ID: http2.SettingNoRFC7540Priorities, Val: 1},
	)
	if d := int64(cfg.ConnWindow) - 65535; d > 0 {
		c.fr.WriteWindowUpdate(0, uint32(d))
		c.recvWin += d
	}
	return c
}

type ctrlWriter struct{ c *Conn }

func (w ctrlWriter) Write(p []byte) (int, error) {
	w.c.ctrl = append(w.c.ctrl, p...)
	return len(p), nil
}

// frameReader hands the Framer exactly one whole frame.
type frameReader struct{ p []byte }

func (r *frameReader) Read(b []byte) (int, error) {
	if len(r.p) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(b, r.p)
	r.p = r.p[n:]
	return n, nil
}

// Feed processes the whole frames at the start of p and returns how many
// bytes it used; the rest waits for more input. now is a monotonic clock
// in nanoseconds. A *ConnError means the connection is over: GOAWAY is
// queued, and the caller closes once Produce has given it out.
func (c *Conn) Feed(p []byte, now int64) (int, error) {
	c.now = now
	if c.dead {
		return len(p), nil
	}
	used := 0
	if !c.preface {
		n := min(len(p), len(Preface))
		if string(p[:n]) != Preface[:n] {
			return len(p), c.fail(http2.ErrCodeProtocol, "invalid connection preface")
		}
		if n < len(Preface) {
			return 0, nil
		}
		c.preface = true
		used = n
	}
	for !c.dead {
		rest := p[used:]
		if len(rest) < 9 {
			break
		}
		length := int(rest[0])<<16 | int(rest[1])<<8 | int(rest[2])
		if length > maxReadFrame {
			// RFC 9113 §4.2: a frame larger than SETTINGS_MAX_FRAME_SIZE is
			// a FRAME_SIZE_ERROR; on a header block or stream 0 it must be
			// a connection error, and we do not read past it either way.
			return len(p), c.fail(http2.ErrCodeFrameSize, "frame larger than SETTINGS_MAX_FRAME_SIZE")
		}
		if len(rest) < 9+length {
			break
		}
		used += 9 + length
		if err := c.frame(rest[:9+length]); err != nil {
			return len(p), err
		}
	}
	if c.dead {
		return len(p), nil
	}
	return used, nil
}

// frame handles one whole frame.
func (c *Conn) frame(raw []byte) error {
	typ := http2.FrameType(raw[3])
	id := binary.BigEndian.Uint32(raw[5:9]) & (1<<31 - 1)
	if !c.settings && typ != http2.FrameSettings {
		return c.fail(http2.ErrCodeProtocol, "first frame is not SETTINGS")
	}
	if typ == http2.FramePriority && len(raw) != 9+5 && c.hdr.id == 0 {
		// RFC 9113 §6.3: a PRIORITY frame of another length is a stream
		// error of type FRAME_SIZE_ERROR (x/net would end the connection).
		if id == 0 {
			return c.fail(http2.ErrCodeProtocol, "PRIORITY on stream 0")
		}
		c.ctrlCost()
		c.resetStream(id, http2.ErrCodeFrameSize)
		return c.deadErr()
	}
	c.rd.p = raw
	f, err := c.fr.ReadFrame()
	if err != nil {
		var se http2.StreamError
		switch {
		case errors.As(err, &se):
			c.event(EventProtocolError, err)
			c.resetStream(se.StreamID, se.Code)
			return c.deadErr()
		case errors.Is(err, http2.ErrFrameTooLarge):
			return c.fail(http2.ErrCodeFrameSize, "frame too large")
		}
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			reason := "invalid frame"
			if d := c.fr.ErrorDetail(); d != nil {
				reason = d.Error()
			}
			return c.fail(http2.ErrCode(ce), reason)
		}
		return c.fail(http2.ErrCodeProtocol, err.Error())
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.HeadersFrame:
		return c.onHeaders(f)
	case *http2.ContinuationFrame:
		return c.onContinuation(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PingFrame:
		if !c.ctrlCost() {
			return c.deadErr()
		}
		if !f.IsAck() {
			c.fr.WritePing(true, f.Data)
		}
		return c.checkQueue()
	case *http2.PriorityFrame:
		if !c.ctrlCost() {
			return c.deadErr()
		}
		if f.StreamDep == f.StreamID {
			// RFC 9113 §5.3.1: a stream cannot depend on itself.
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
		return c.deadErr()
	case *http2.PriorityUpdateFrame:
		return c.onPriorityUpdate(f)
	case *http2.GoAwayFrame:
		c.peerAway = true
		return nil
	case *http2.PushPromiseFrame:
		return c.fail(http2.ErrCodeProtocol, "PUSH_PROMISE from a client")
	default:
		// Unknown frame types are ignored (RFC 9113 §4.1), but cost.
		if !c.ctrlCost() {
			return c.deadErr()
		}
		return nil
	}
}

func (c *Conn) deadErr() error {
	if c.dead {
		return &ConnError{Code: http2.ErrCodeEnhanceYourCalm, Reason: "limit exceeded"}
	}
	return nil
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		if !c.settings {
			return c.fail(http2.ErrCodeProtocol, "first frame is a SETTINGS acknowledgement")
		}
		return nil
	}
	c.settings = true
	if !c.ctrlCost() {
		return c.deadErr()
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			// RFC 9113 §6.9.2: the change applies to every stream's window,
			// which may go negative; one past 2^31-1 is a connection
			// FLOW_CONTROL_ERROR.
			d := int64(s.Val) - c.peerInit
			for _, st := range c.streams {
				if st.sendWindow+d > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			for _, st := range c.streams {
				st.sendWindow += d
			}
			c.peerInit = int64(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerMax = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.enc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return c.fail(http2.ErrCode(ce), "invalid SETTINGS value")
		}
		return c.fail(http2.ErrCodeProtocol, err.Error())
	}
	c.fr.WriteSettingsAck()
	return c.checkQueue()
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if !c.windowUpdateCost() {
		return c.deadErr()
	}
	if f.StreamID == 0 {
		if c.sendWin+int64(f.Increment) > maxWindow {
			return c.fail(http2.ErrCodeFlowControl, "connection window past 2^31-1")
		}
		c.sendWin += int64(f.Increment)
		return nil // connBlock clears on progress (Produce), not on a credit
	}
	if f.StreamID > c.maxID {
		return c.fail(http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil // closed: ignored
	}
	if st.sendWindow+int64(f.Increment) > maxWindow {
		c.resetStream(st.ID, http2.ErrCodeFlowControl)
		return c.deadErr()
	}
	st.sendWindow += int64(f.Increment)
	return nil // blocked clears on progress (Produce), not on a credit
}

func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	if f.StreamID > c.maxID {
		return c.fail(http2.ErrCodeProtocol, "RST_STREAM on an idle stream")
	}
	st := c.streams[f.StreamID]
	if st == nil {
		// RFC 9113 §5.1: after receiving RST_STREAM, frames on the stream
		// are STREAM_CLOSED errors, even if we had reset it too.
		c.forgetReset(f.StreamID)
		return nil
	}
	if !st.localDone && !c.resetCost() {
		// A stream reset before its response was out: the rapid-reset
		// pattern when it comes in floods.
		return c.deadErr()
	}
	c.closeStream(st, f.ErrCode, true)
	return nil
}

func (c *Conn) onPriorityUpdate(f *http2.PriorityUpdateFrame) error {
	if !c.ctrlCost() {
		return c.deadErr()
	}
	id := f.PrioritizedStreamID
	if id%2 == 0 {
		return c.fail(http2.ErrCodeProtocol, "PRIORITY_UPDATE for a server stream")
	}
	if st := c.streams[id]; st != nil {
		st.Priority = ParsePriority([]byte(f.Priority), st.Priority)
		return nil
	}
	if id > c.maxID && len(c.pending) < pendingPriorities {
		// RFC 9218 §7.1: kept for the stream when it opens.
		if c.pending == nil {
			c.pending = map[uint32]Priority{}
		}
		c.pending[id] = ParsePriority([]byte(f.Priority), DefaultPriority)
	}
	return nil
}

func (c *Conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	size := int64(f.Length) // padding counts against flow control
	if size > c.recvWin {
		return c.fail(http2.ErrCodeFlowControl, "DATA past the connection window")
	}
	c.recvWin -= size
	c.recvTaken += size
	if c.recvTaken >= int64(c.cfg.ConnWindow)/2 {
		c.fr.WriteWindowUpdate(0, uint32(c.recvTaken))
		c.recvWin += c.recvTaken
		c.recvTaken = 0
	}
	if id > c.maxID {
		return c.fail(http2.ErrCodeProtocol, "DATA on an idle stream")
	}
	if f.Length == 0 && !f.StreamEnded() && !c.ctrlCost() {
		return c.deadErr()
	}
	st := c.streams[id]
	if st == nil || st.remoteDone {
		// RFC 9113 §5.1: DATA on a half-closed (remote) or closed stream is
		// a STREAM_CLOSED stream error, except on a stream we reset: its
		// frames may still be in flight and are ignored.
		if !c.wasReset(id) {
			c.resetStream(id, http2.ErrCodeStreamClosed)
		}
		return c.deadErr()
	}
	if size > st.recvWindow {
		c.resetStream(id, http2.ErrCodeFlowControl)
		return c.deadErr()
	}
	st.recvWindow -= size
	st.bodyRecv += int64(len(f.Data()))
	if st.localDone && !f.StreamEnded() && st.recvWindow < int64(c.cfg.StreamWindow)/2 {
		// The response is complete and the request body is not read:
		// rather than let the client stall on a closed window, tell it to
		// stop without error (RFC 9113 §8.1).
		c.resetStream(id, http2.ErrCodeNo)
		return nil
	}
	if cl := st.Req.ContentLength; cl >= 0 && st.bodyRecv > cl {
		// RFC 9113 §8.1.1: content-length disagreeing with DATA is malformed.
		c.malformed(st, "body longer than content-length")
		return c.deadErr()
	}
	if f.StreamEnded() {
		if err := c.remoteEnd(st); err != nil || st.done && st.Reset {
			return err
		}
	}
	if bh, ok := c.h.(BodyHandler); ok && !st.done {
		bh.Body(st, f.Data(), f.StreamEnded())
	}
	return c.deadErr()
}

// Consumed opens st's receive window by n bytes of its request body that
// the handler has passed on (BodyHandler).
func (c *Conn) Consumed(st *Stream, n int) {
	if n <= 0 || c.dead || st.remoteDone || c.streams[st.ID] != st {
		return
	}
	st.recvWindow += int64(n)
	c.fr.WriteWindowUpdate(st.ID, uint32(n))
}

// BodyReady says the first n bytes of st's streamed body (Respond with
// bodyLen -1) are ready for Produce to pull through the Sink.
func (c *Conn) BodyReady(st *Stream, n int64) {
	if st.bodyLen < 0 && n > st.avail {
		st.avail = n
	}
}

// EndBody says st's streamed body ends after the bytes made ready: the
// last DATA frame carries END_STREAM (an empty one if need be), or, with
// trailers (lower-case names, none a pseudo-header or connection-specific
// field), a HEADERS frame after it does (RFC 9113 §8.1).
func (c *Conn) EndBody(st *Stream, trailers []hpack.HeaderField) {
	if st.bodyLen < 0 {
		st.ended = true
		st.trailers = trailers
	}
}

// AbortStream resets st (INTERNAL_ERROR) because its response cannot be
// completed: a proxied body cut by its upstream. The client never takes
// it for a whole response.
func (c *Conn) AbortStream(st *Stream) {
	if c.dead || c.streams[st.ID] != st {
		return
	}
	c.abortStream(st)
}

// remoteEnd marks the request complete (END_STREAM).
func (c *Conn) remoteEnd(st *Stream) error {
	if cl := st.Req.ContentLength; cl >= 0 && st.bodyRecv != cl {
		c.malformed(st, "body shorter than content-length")
		return c.deadErr()
	}
	st.remoteDone = true
	if st.localDone {
		c.closeStream(st, 0, false)
	}
	return nil
}

// fail queues GOAWAY with code and marks the connection dead.
func (c *Conn) fail(code ErrCode, reason string) error {
	ce := &ConnError{Code: code, Reason: reason}
	if !c.dead {
		c.dead = true
		c.goAway = true
		if code != http2.ErrCodeEnhanceYourCalm {
			c.event(EventProtocolError, ce)
		}
		c.fr.WriteGoAway(c.maxID, code, []byte(reason))
		for _, st := range c.streams {
			c.closeStream(st, code, false)
		}
	}
	return ce
}
