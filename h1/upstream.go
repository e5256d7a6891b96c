package h1

// Response is a parsed response head, as an upstream server sent it to
// the engine's reverse proxy. All byte slices alias the buffer given to
// ParseResponse.
type Response struct {
	Minor   int // HTTP/1.Minor: 0 or 1
	Status  int // 100 to 599
	Reason  []byte
	Headers []Header

	// ContentLength is the body length from Content-Length, or -1.
	ContentLength int64
	Chunked       bool // Transfer-Encoding: chunked
	Close         bool // the upstream closes the connection after this response
}

// Get returns the value of the first header named name (ASCII
// case-insensitive), or nil.
func (r *Response) Get(name string) []byte {
	for i := range r.Headers {
		if equalFold(r.Headers[i].Name, name) {
			return r.Headers[i].Value
		}
	}
	return nil
}

// BodyFollows reports whether a body follows the head of a response to
// a request with method head (true: HEAD): not for 1xx, 204 and 304
// (RFC 9112 §6.3).
func (r *Response) BodyFollows(head bool) bool {
	return !head && r.Status >= 200 && r.Status != 204 && r.Status != 304
}

// UntilClose reports whether the body of a response that has one is
// delimited by the upstream closing the connection: no Content-Length
// and no chunked coding.
func (r *Response) UntilClose() bool { return !r.Chunked && r.ContentLength < 0 }

// ParseResponse parses one response head from the start of buf into r,
// with the parser's limits. It returns the bytes the head used, or
// ErrIncomplete, or an *Error (Status 502: the upstream's response
// cannot be relayed). A proxy reads every framing rule strictly here,
// as it does for requests: a response it misreads would be relayed
// with the wrong length, or the next response on the connection given to
// the wrong client.
func (p *Parser) ParseResponse(buf []byte, r *Response) (int, error) {
	*r = Response{ContentLength: -1, Headers: p.headers[:0]}
	lim := p.limits
	line, next, err := nextLine(buf, 0)
	if err != nil {
		if err == ErrIncomplete && len(buf) >= lim.MaxHeadBytes {
			return 0, fail(502, "response head too large")
		}
		if err != ErrIncomplete {
			return 0, fail(502, "bad status line")
		}
		return 0, err
	}
	// status-line = HTTP-version SP status-code SP [ reason-phrase ]
	// (RFC 9112 §4); a missing SP after the code is tolerated.
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' ||
		!isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) || len(line) > 12 && line[12] != ' ' {
		return 0, fail(502, "bad status line")
	}
	switch line[7] {
	case '0':
		r.Minor = 0
	case '1':
		r.Minor = 1
	default:
		return 0, fail(502, "unsupported HTTP version")
	}
	r.Status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if r.Status < 100 || r.Status > 599 {
		return 0, fail(502, "status code out of range")
	}
	if len(line) > 13 {
		r.Reason = line[13:]
		for _, c := range r.Reason {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return 0, fail(502, "control character in reason phrase")
			}
		}
	}

	sawCL, sawTE := false, false
	for {
		line, n, err := nextLine(buf, next)
		if err != nil {
			if err == ErrIncomplete && len(buf) >= lim.MaxHeadBytes {
				return 0, fail(502, "response head too large")
			}
			if err != ErrIncomplete {
				return 0, fail(502, "bad field line")
			}
			return 0, err
		}
		if n > lim.MaxHeadBytes {
			return 0, fail(502, "response head too large")
		}
		next = n
		if len(line) == 0 {
			break
		}
		// RFC 9112 §5.2: a proxy that receives obs-fold in a response
		// MUST either discard the message (502) or replace it; we discard.
		if line[0] == ' ' || line[0] == '\t' || next < len(buf) && (buf[next] == ' ' || buf[next] == '\t') {
			return 0, fail(502, "obs-fold in response field line")
		}
		if len(r.Headers) >= lim.MaxHeaders {
			return 0, fail(502, "too many response header fields")
		}
		h, err := parseFieldLine(line)
		if err != nil {
			return 0, fail(502, "malformed response field line")
		}
		r.Headers = append(r.Headers, h)
		switch {
		case equalFold(h.Name, "content-length"):
			if sawCL {
				return 0, fail(502, "repeated Content-Length in response")
			}
			sawCL = true
			cl, ok := parseContentLength(h.Value)
			if !ok {
				return 0, fail(502, "invalid Content-Length in response")
			}
			r.ContentLength = cl
		case equalFold(h.Name, "transfer-encoding"):
			if sawTE {
				return 0, fail(502, "repeated Transfer-Encoding in response")
			}
			sawTE = true
			if !equalFold(h.Value, "chunked") {
				return 0, fail(502, "unsupported transfer coding in response")
			}
			r.Chunked = true
		case equalFold(h.Name, "connection"):
			if tokenListHas(h.Value, "close") {
				r.Close = true
			}
		}
	}
	if sawTE && sawCL {
		// RFC 9112 §6.3 lets Transfer-Encoding win and calls such a
		// message a possible smuggling attempt; a proxy refuses it.
		return 0, fail(502, "Transfer-Encoding with Content-Length in response")
	}
	if sawTE && r.Minor == 0 {
		return 0, fail(502, "Transfer-Encoding in HTTP/1.0 response")
	}
	if r.Minor == 0 && !tokenListHas(r.Get("connection"), "keep-alive") {
		r.Close = true
	}
	if r.UntilClose() && r.BodyFollows(false) {
		r.Close = true
	}
	return next, nil
}

// BodyReader frames a message body: it finds the body's data in the
// bytes that arrive, across chunk boundaries, so that a proxy can pass
// on exactly the body and nothing after it.
//
// The zero value is not usable; call ResetRequest or ResetResponse.
type BodyReader struct {
	s        BodySkipper
	untilEOF bool
	trailers []byte // a chunked body's trailer lines, each ending in CRLF
}

// maxTrailerBytes bounds the trailer section kept to be passed on.
const maxTrailerBytes = 16 << 10

// Trailers returns the trailer section of a chunked body that is Done:
// its field lines as received (validated), each ending in CRLF; nil when
// there were none.
func (b *BodyReader) Trailers() []byte { return b.trailers }

// ResetRequest prepares b for the body of request r.
func (b *BodyReader) ResetRequest(r *Request) {
	*b = BodyReader{trailers: b.trailers[:0]}
	b.s.Reset(r)
}

// ResetResponse prepares b for the body of response r, which has one
// (BodyFollows).
func (b *BodyReader) ResetResponse(r *Response) {
	*b = BodyReader{untilEOF: r.UntilClose(), trailers: b.trailers[:0]}
	b.s.Reset(&Request{Chunked: r.Chunked, ContentLength: r.ContentLength})
}

// ContentLeft is how many bytes of a Content-Length body are still to
// come, or -1 for a chunked body or one read until EOF.
func (b *BodyReader) ContentLeft() int64 {
	if b.untilEOF || b.s.chunked {
		return -1
	}
	return b.s.remaining
}

// Advance counts n bytes of a Content-Length body as read, when they were
// moved without passing through Read (spliced).
func (b *BodyReader) Advance(n int64) {
	if !b.untilEOF && !b.s.chunked {
		n = min(n, b.s.remaining)
		b.s.remaining -= n
		b.s.total += n
	}
}

// UntilEOF reports whether the body ends when the connection does.
func (b *BodyReader) UntilEOF() bool { return b.untilEOF }

// Done reports whether the whole body (and, if chunked, its last chunk
// and trailers) has been read. A body read until EOF is never done.
func (b *BodyReader) Done() bool { return !b.untilEOF && b.s.Done() }

// Read takes framing and data from the start of buf. It returns how many
// bytes of buf it used and the body data among them (aliasing buf; at most
// one chunk's worth). It stops after data, at the end of the body, or at
// the end of buf. Malformed chunked framing is an *Error (400).
func (b *BodyReader) Read(buf []byte) (int, []byte, error) {
	if b.untilEOF {
		return len(buf), buf, nil
	}
	if !b.s.chunked {
		n := int(min(int64(len(buf)), b.s.remaining))
		b.s.Skip(buf[:n])
		return n, buf[:n], nil
	}
	used := 0
	for used < len(buf) && !b.s.Done() {
		if b.s.state == chunkData {
			n := int(min(int64(len(buf)-used), b.s.remaining))
			k, err := b.s.Skip(buf[used : used+n])
			return used + k, buf[used : used+k], err
		}
		// Framing: one byte at a time, up to the next data. Trailer
		// lines are kept, to be passed on.
		st, c := b.s.state, buf[used]
		k, err := b.s.Skip(buf[used : used+1])
		used += k
		if err != nil || k == 0 {
			return used, nil, err
		}
		if st == chunkTrailer && c != '\r' || st == chunkTrailerLine || st == chunkTrailerLF {
			if len(b.trailers) >= maxTrailerBytes {
				return used, nil, fail(400, "trailer section too large")
			}
			b.trailers = append(b.trailers, c)
		}
	}
	return used, nil, nil
}
