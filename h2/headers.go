package h2

import (
	"errors"
	"fmt"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func (c *Conn) onHeaders(f *http2.HeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return c.fail(http2.ErrCodeProtocol, "HEADERS on an even stream")
	}
	h := &c.hdr
	*h = struct {
		st       *Stream
		id       uint32
		end      bool
		trailers bool
		frames   int
		bytes    int
		size     uint32
		tooLarge bool
		bad      error
		pseudoOK bool
		fields   []Field
		at       int64
	}{id: id, end: f.StreamEnded(), pseudoOK: true, fields: h.fields[:0], at: c.now}
	if f.HasPriority() && f.Priority.StreamDep == id {
		h.bad = errors.New("stream depends on itself")
	}
	switch st := c.streams[id]; {
	case st != nil:
		// Trailers: a second HEADERS, which must end the stream.
		h.st, h.trailers = st, true
		if st.remoteDone {
			h.bad = errStreamClosed
		}
	case id <= c.maxID:
		// Closed, or skipped: decoded for HPACK's sake, then refused.
		h.bad = errStreamClosed
		h.st = &Stream{ID: id, conn: c}
	default:
		c.maxID = id
		st := &Stream{ID: id, conn: c, Priority: DefaultPriority, sendWindow: c.peerInit,
			recvWindow: int64(c.cfg.StreamWindow)}
		st.Req.ContentLength = -1
		if p, ok := c.pending[id]; ok {
			st.Priority = p
			delete(c.pending, id)
		}
		h.st = st
	}
	c.dec.SetEmitEnabled(true)
	return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
}

var errStreamClosed = errors.New("HEADERS on a closed stream")

func (c *Conn) onContinuation(f *http2.ContinuationFrame) error {
	return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
}

// headerFragment decodes one fragment of the header block in progress.
// Every block is decoded, even one that will be refused, to keep the
// HPACK state in step with the client's.
func (c *Conn) headerFragment(p []byte, end bool) error {
	h := &c.hdr
	h.frames++
	h.bytes += len(p)
	if h.frames > maxHeaderFrames || h.bytes > 4*int(c.cfg.MaxHeaderListSize) {
		c.event(EventContinuationFlood, nil)
		return c.fail(http2.ErrCodeEnhanceYourCalm, "header block too long")
	}
	if _, err := c.dec.Write(p); err != nil {
		c.event(EventCompressionError, err)
		return c.fail(http2.ErrCodeCompression, "header block: "+err.Error())
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		c.event(EventCompressionError, err)
		return c.fail(http2.ErrCodeCompression, "header block: "+err.Error())
	}
	c.hdr.id = 0
	return c.headersDone()
}

// onField collects one decoded field of the block in progress.
func (c *Conn) onField(f hpack.HeaderField) {
	h := &c.hdr
	h.size += f.Size()
	if h.size > c.cfg.MaxHeaderListSize {
		h.tooLarge = true
		c.dec.SetEmitEnabled(false) // an HPACK bomb decodes to nothing more
		return
	}
	if h.bad != nil || h.st == nil {
		return
	}
	if err := checkField(f.Name, f.Value); err != nil {
		h.bad = err
		return
	}
	st := h.st
	if f.IsPseudo() {
		if !h.pseudoOK || h.trailers {
			h.bad = errors.New("pseudo-header after regular fields")
			return
		}
		r := &st.Req
		var dst *[]byte
		switch f.Name {
		case ":method":
			dst = &r.Method
		case ":scheme":
			dst = &r.Scheme
		case ":authority":
			dst = &r.Authority
		case ":path":
			dst = &r.Path
		default:
			h.bad = fmt.Errorf("unknown pseudo-header %s", f.Name)
			return
		}
		if *dst != nil {
			h.bad = fmt.Errorf("repeated %s", f.Name)
			return
		}
		*dst = st.keep(f.Value)
		return
	}
	h.pseudoOK = false
	switch f.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		// RFC 9113 §8.2.2: connection-specific fields make it malformed.
		h.bad = fmt.Errorf("connection-specific field %s", f.Name)
		return
	case "te":
		if f.Value != "trailers" {
			h.bad = errors.New("te other than trailers")
			return
		}
	}
	if h.trailers {
		st.Trailers = append(st.Trailers, Field{st.keep(f.Name), st.keep(f.Value)})
		return
	}
	if f.Name == "content-length" {
		n, ok := parseLength(f.Value)
		if !ok || st.Req.ContentLength >= 0 && st.Req.ContentLength != n {
			h.bad = errors.New("invalid content-length")
			return
		}
		st.Req.ContentLength = n
	}
	h.fields = append(h.fields, Field{st.keep(f.Name), st.keep(f.Value)})
}

// keep copies b into the stream's arena.
func (st *Stream) keep(s string) []byte {
	if s == "" {
		return []byte{}
	}
	start := len(st.arena)
	st.arena = append(st.arena, s...)
	return st.arena[start:len(st.arena):len(st.arena)]
}

// headersDone acts on a complete header block.
func (c *Conn) headersDone() error {
	h := &c.hdr
	st := h.st
	if st == nil {
		return nil
	}
	if h.trailers {
		switch {
		case h.bad == errStreamClosed:
			c.resetStream(st.ID, http2.ErrCodeStreamClosed)
		case h.bad != nil || !h.end:
			c.malformed(st, "trailers without END_STREAM or with pseudo-headers")
		default:
			if err := c.remoteEnd(st); err != nil {
				return err
			}
			if bh, ok := c.h.(BodyHandler); ok && !st.done {
				bh.Body(st, nil, true) // trailers end the body: st.Trailers has them
			}
		}
		return c.deadErr()
	}
	if h.bad == errStreamClosed {
		if !c.wasReset(st.ID) {
			// RFC 9113 §5.1.1: a new stream's identifier must be greater
			// than all the client opened before; anything else is a
			// PROTOCOL_ERROR.
			return c.fail(http2.ErrCodeProtocol, "HEADERS on a closed stream")
		}
		return nil
	}
	if c.goAway {
		c.resetStream(st.ID, http2.ErrCodeRefusedStream)
		return c.deadErr()
	}
	if uint32(len(c.streams)+c.zombies) >= c.cfg.MaxConcurrentStreams {
		c.event(EventRefused, nil)
		// Streams opened past the limit cost like streams reset (in
		// resetStream): a flood of them is the rapid-reset attack
		// against a busy server.
		c.resetStream(st.ID, http2.ErrCodeRefusedStream)
		return c.deadErr()
	}
	st.Req.Fields = append(st.Req.Fields[:0], h.fields...)
	h.fields = h.fields[:0]
	c.streams[st.ID] = st
	if h.bad == nil {
		h.bad = st.Req.validate()
	}
	if h.bad != nil {
		c.malformed(st, h.bad.Error())
		return c.deadErr()
	}
	if p := st.Req.Get("priority"); p != nil {
		st.Priority = ParsePriority(p, st.Priority)
	}
	if h.end {
		if err := c.remoteEnd(st); err != nil || st.done {
			return err
		}
	}
	if h.tooLarge {
		// RFC 9113 §10.5.1: a header section larger than the server will
		// handle can be answered 431.
		c.event(EventHeaderTooLarge, nil)
		c.Respond(st, 431, nil, 0)
		return c.deadErr()
	}
	c.h.Request(st)
	return c.deadErr()
}

// malformed resets a stream whose request broke RFC 9113 §8.1.1. why is
// a bare reason (the errors set in hdr.bad and by validate are reasons
// too); the event's error names the package once.
func (c *Conn) malformed(st *Stream, why string) {
	c.event(EventMalformed, fmt.Errorf("h2: malformed request on stream %d: %s", st.ID, why))
	c.resetStream(st.ID, http2.ErrCodeProtocol)
}
