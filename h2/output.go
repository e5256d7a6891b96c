package h2

import (
	"encoding/binary"
	"strconv"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// minFrame is the smallest DATA frame Produce cuts to fit its budget; a
// smaller remainder waits for the next call (windows may still force
// smaller frames).
const minFrame = 4096

// Respond queues st's response head, encoded now, and announces a body of
// bodyLen bytes that Produce pulls through the Sink. With bodyLen 0 the
// head ends the stream; with -1 the body is streamed: Produce pulls what
// BodyReady made ready, and ends the stream after EndBody. A stream that
// is already done is ignored.
func (c *Conn) Respond(st *Stream, status int, fields []hpack.HeaderField, bodyLen int64) {
	if st.done || st.responded || c.dead || c.streams[st.ID] != st {
		return
	}
	st.responded = true
	st.bodyLen = bodyLen
	c.encBuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	for _, f := range fields {
		c.enc.WriteField(f)
	}
	c.writeHeaderBlock(st.ID, c.encBuf.Bytes(), bodyLen == 0)
	if bodyLen == 0 {
		c.localEnd(st)
		return
	}
	c.sending = append(c.sending, st)
}

func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 206:
		return "206"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// writeHeaderBlock frames a header block as HEADERS and CONTINUATION
// frames no larger than the client allows.
func (c *Conn) writeHeaderBlock(id uint32, block []byte, endStream bool) {
	typ := http2.FrameHeaders
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), c.peerMax)
		var flags http2.Flags
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		if first && endStream {
			flags |= http2.FlagHeadersEndStream
		}
		c.ctrl = appendFrameHeader(c.ctrl, n, typ, flags, id)
		c.ctrl = append(c.ctrl, block[:n]...)
		block = block[n:]
		typ = http2.FrameContinuation
	}
}

func appendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
}

// localEnd marks st's response complete. A request still in progress
// keeps the stream half-closed (local): its remaining frames are still
// checked, and it is told to stop when its body would fill the window
// (onData) or it lingers past the stall timeout (Expire).
func (c *Conn) localEnd(st *Stream) {
	st.localDone = true
	st.localAt = max(c.now, 1)
	if i := c.sendingIndex(st); i >= 0 {
		c.sending = append(c.sending[:i], c.sending[i+1:]...)
	}
	if st.remoteDone {
		c.closeStream(st, 0, false)
		return
	}
	c.notifyDone(st)
}

// Produce gives the Sink up to about budget bytes of output: queued
// control frames and response heads first, then DATA frames of the
// streams the scheduler picks, as flow control allows. It returns the
// bytes produced; zero means nothing can be sent now.
func (c *Conn) Produce(s Sink, budget int) int {
	n := 0
	if len(c.ctrl) > 0 {
		k := min(len(c.ctrl), budget)
		s.Bytes(c.ctrl[:k])
		n = k
		if k == len(c.ctrl) {
			c.ctrl = c.ctrl[:0]
			if cap(c.ctrl) > 64<<10 {
				c.ctrl = nil
			}
		} else {
			c.ctrl = c.ctrl[:copy(c.ctrl, c.ctrl[k:])]
		}
	}
	var hdr [9]byte
	for !c.dead && c.sendWin > 0 && budget-n-9 > 0 {
		st := c.pick()
		if st == nil {
			break
		}
		left := st.left()
		size := min(int64(c.peerMax), st.sendWindow, c.sendWin, left)
		if room := int64(budget - n - 9); size > room {
			if room < minFrame {
				break
			}
			size = room
		}
		var flags http2.Flags
		end := size == left && st.final()
		trailers := end && len(st.trailers) > 0
		if end && !trailers {
			flags = http2.FlagDataEndStream
		}
		appendFrameHeader(hdr[:0], int(size), http2.FrameData, flags, st.ID)
		c.dataSent++
		if size == 0 {
			if !trailers {
				s.Bytes(hdr[:]) // a streamed body's end: an empty DATA frame
				n += 9
			}
		} else if !s.Data(st, hdr[:], st.sent, int(size)) {
			c.abortStream(st)
			if k := min(len(c.ctrl), budget-n); k > 0 {
				// The RST_STREAM goes out now, before another stream's
				// DATA, so the client learns at once.
				s.Bytes(c.ctrl[:k])
				n += k
				c.ctrl = c.ctrl[:copy(c.ctrl, c.ctrl[k:])]
			}
			continue
		}
		st.sent += size
		st.sendWindow -= size
		c.sendWin -= size
		c.connSent += size
		if st.blocked != 0 && st.sent-st.markSent >= stallProgress {
			st.blocked = 0
		}
		if c.connBlock != 0 && c.connSent-c.connMark >= stallProgress {
			c.connBlock = 0
		}
		c.serveSeq++
		st.served = c.serveSeq
		if size > 0 {
			n += 9 + int(size)
		}
		if end {
			if trailers {
				// The trailers end the stream, right after its last DATA.
				c.encBuf.Reset()
				for _, f := range st.trailers {
					c.enc.WriteField(f)
				}
				st.trailers = nil
				c.writeHeaderBlock(st.ID, c.encBuf.Bytes(), true)
				s.Bytes(c.ctrl)
				n += len(c.ctrl)
				c.ctrl = c.ctrl[:0]
			}
			c.localEnd(st)
			c.connBlock = 0 // a finished response is progress
		}
	}
	for _, st := range c.sending {
		if st.sendWindow <= 0 && st.left() > 0 && st.blocked == 0 {
			st.blocked, st.markSent = max(c.now, 1), st.sent
		}
	}
	if c.connBlock == 0 && c.waiting() {
		c.connBlock, c.connMark = max(c.now, 1), c.connSent
	}
	return n
}

// ready reports whether Produce can send something of st now: body bytes
// within its window, or the empty frame that ends a streamed body.
func (st *Stream) ready() bool {
	left := st.left()
	return left > 0 && st.sendWindow > 0 || left == 0 && st.ended
}

// waiting reports whether some response has body bytes ready that the
// client's windows hold back: a streamed body waiting for its upstream is
// not the client's stall.
func (c *Conn) waiting() bool {
	for _, st := range c.sending {
		if st.left() > 0 {
			return true
		}
	}
	return false
}

// pick chooses the next stream to send DATA for (RFC 9218): the lowest
// urgency first; within one, non-incremental responses one after another
// in stream order, then incremental ones in turn.
func (c *Conn) pick() *Stream {
	var best *Stream
	for _, st := range c.sending {
		if !st.ready() {
			continue
		}
		if best == nil || before(st, best) {
			best = st
		}
	}
	return best
}

func before(a, b *Stream) bool {
	pa, pb := a.Priority, b.Priority
	switch {
	case pa.Urgency != pb.Urgency:
		return pa.Urgency < pb.Urgency
	case pa.Incremental != pb.Incremental:
		return !pa.Incremental
	case pa.Incremental && a.served != b.served:
		return a.served < b.served
	}
	return a.ID < b.ID
}

// HasOutput reports whether Produce would produce something now.
func (c *Conn) HasOutput() bool {
	if len(c.ctrl) > 0 {
		return true
	}
	if c.dead {
		return false
	}
	for _, st := range c.sending {
		if st.ready() && (c.sendWin > 0 || st.left() == 0) {
			return true
		}
	}
	return false
}

// stallProgress is how much a stream (or the connection) that ran out of
// window must send before its stall clock stops: a window reopened a byte
// at a time is still a stall.
const stallProgress = 16 << 10

// Expire enforces the stall timeout (monotonic ns): a stream that ran out
// of window and has not since been granted enough to send stallProgress
// bytes (or its whole rest) within timeout is reset (CANCEL); when the
// connection has had responses waiting for timeout without sending
// stallProgress bytes or finishing one, it ends. A stream whose
// response ended while its request goes on (a body nobody reads) is reset
// (NO_ERROR) after bodyTimeout. A *ConnError means the connection ended.
func (c *Conn) Expire(now, timeout, bodyTimeout int64) error {
	c.now = now
	if c.dead {
		return nil
	}
	if !c.waiting() {
		c.connBlock = 0
	}
	var stalled []uint32
	for _, st := range c.sending {
		if st.blocked != 0 && st.sendWindow < min(stallProgress, st.left()) && now-st.blocked > timeout {
			stalled = append(stalled, st.ID)
		}
	}
	for _, id := range stalled {
		c.event(EventStall, nil)
		c.resetStream(id, http2.ErrCodeCancel)
	}
	if c.connBlock != 0 && c.waiting() && now-c.connBlock > timeout {
		// Responses are waiting, yet for timeout the connection has
		// neither sent stallProgress bytes nor finished a response: its
		// window is shut or trickled, or its streams are, one after
		// another (each reset, the next already open), which per-stream
		// resets alone would let hold the connection forever.
		c.event(EventStall, nil)
		return c.fail(http2.ErrCodeEnhanceYourCalm, "responses made no progress")
	}
	stalled = stalled[:0]
	for id, st := range c.streams {
		if st.localDone && now-st.localAt > bodyTimeout {
			stalled = append(stalled, id) // answered; the request never ended
		}
	}
	for _, id := range stalled {
		c.resetStream(id, http2.ErrCodeNo)
	}
	return nil
}

// ExpireHeaders ends the connection (GOAWAY ENHANCE_YOUR_CALM) when a
// header block has been left unfinished for longer than timeout
// (monotonic ns): RFC 9113 §6.10 lets no other frame in until its last
// CONTINUATION, so a client that stops mid-block holds the connection.
func (c *Conn) ExpireHeaders(now, timeout int64) error {
	c.now = now
	if c.dead || c.hdr.id == 0 || now-c.hdr.at <= timeout {
		return nil
	}
	c.event(EventHeaderTimeout, nil)
	return c.fail(http2.ErrCodeEnhanceYourCalm, "header block unfinished past the header timeout")
}

// Started reports whether the client has opened a stream: until then the
// connection waits for its first request.
func (c *Conn) Started() bool { return c.maxID > 0 }

// Shutdown starts a graceful close: GOAWAY names the last stream that
// will be answered, later ones are refused, and Finished reports true
// once the open streams are done.
func (c *Conn) Shutdown() {
	if c.goAway {
		return
	}
	c.goAway = true
	c.fr.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
}

// Open returns the number of streams in progress.
func (c *Conn) Open() int { return len(c.streams) }

// Finished reports whether the connection has nothing left to do: it is
// going away (GOAWAY sent or received, or a connection error) with no
// stream open and no output left.
func (c *Conn) Finished() bool {
	return (c.goAway || c.peerAway) && len(c.streams) == 0 && len(c.ctrl) == 0
}

// Dead reports whether a connection error ended the connection.
func (c *Conn) Dead() bool { return c.dead }

// peek returns the header of the frame at the start of p, for tests.
func peek(p []byte) (length int, typ http2.FrameType, flags http2.Flags, id uint32) {
	return int(p[0])<<16 | int(p[1])<<8 | int(p[2]), http2.FrameType(p[3]), http2.Flags(p[4]),
		binary.BigEndian.Uint32(p[5:9]) & (1<<31 - 1)
}

// Abandon ends every open stream (StreamDone, reset CANCEL) without
// output: the connection is gone.
func (c *Conn) Abandon() {
	c.dead = true
	c.ctrl = c.ctrl[:0]
	for _, st := range c.streams {
		c.closeStream(st, http2.ErrCodeCancel, false)
	}
}
