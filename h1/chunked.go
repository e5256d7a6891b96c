package h1

// BodySkipper consumes and discards a request body so the connection can
// carry the next request. The engine serves files and accepts no request
// bodies, but a body the client sends must still be framed exactly, or the
// bytes after it would be read as a new request (the essence of request
// smuggling).
//
// The zero value is not usable; call Reset.
type BodySkipper struct {
	remaining  int64 // bytes left in a Content-Length body or current chunk
	chunked    bool
	state      chunkState
	sizeDigits int
	lineLen    int   // bytes of the current extension or trailer line
	trailers   int   // trailer lines so far
	ext        uint8 // where in a chunk extension (extBWS...)
	colon      bool  // the current trailer line has its colon
	total      int64 // body bytes consumed, for the caller's limit
}

type chunkState uint8

const (
	chunkSize        chunkState = iota // reading hex digits
	chunkExt                           // after the size: extensions until CR
	chunkSizeLF                        // expect LF ending the size line
	chunkData                          // reading chunk data
	chunkDataCR                        // expect CR after data
	chunkDataLF                        // expect LF after data
	chunkTrailer                       // start of a trailer line (or final CRLF)
	chunkTrailerLine                   // inside a trailer line
	chunkTrailerLF                     // expect LF after a trailer line
	chunkFinalLF                       // expect LF of the final CRLF
	chunkDone
)

const (
	maxChunkLine = 4096
	maxTrailers  = 100
)

// Reset prepares s for the body of r.
func (s *BodySkipper) Reset(r *Request) {
	*s = BodySkipper{chunked: r.Chunked}
	if !r.Chunked {
		s.remaining = max(r.ContentLength, 0)
	}
}

// Done reports whether the whole body has been consumed.
func (s *BodySkipper) Done() bool {
	if s.chunked {
		return s.state == chunkDone
	}
	return s.remaining == 0
}

// Consumed returns the number of body bytes (framing included) consumed so far.
func (s *BodySkipper) Consumed() int64 { return s.total }

// Skip consumes body bytes from the start of buf and returns how many it
// used. It stops at the end of the body; the rest of buf belongs to the
// next request. Malformed chunked framing returns an *Error (400).
func (s *BodySkipper) Skip(buf []byte) (int, error) {
	if !s.chunked {
		n := int(min(int64(len(buf)), s.remaining))
		s.remaining -= int64(n)
		s.total += int64(n)
		return n, nil
	}
	i := 0
	for i < len(buf) && s.state != chunkDone {
		c := buf[i]
		switch s.state {
		case chunkSize:
			if isHex(c) {
				// RFC 9112 §7.1: chunk-size = 1*HEXDIG. Bound the digits so
				// the size cannot overflow int64.
				if s.sizeDigits == 15 {
					return i, fail(400, "chunk size too large")
				}
				s.remaining = s.remaining<<4 | int64(hexVal(c))
				s.sizeDigits++
				i++
				continue
			}
			if s.sizeDigits == 0 {
				return i, fail(400, "invalid chunk size")
			}
			switch c {
			case ';', ' ', '\t':
				s.state, s.ext = chunkExt, extBWS
			case '\r':
				s.state = chunkSizeLF
				i++
			default:
				return i, fail(400, "invalid chunk size")
			}
		case chunkExt:
			// chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ),
			// value a token or a quoted-string (RFC 9112 §7.1.1). The
			// extensions are discarded but must be well formed, and
			// their length is bounded.
			if s.lineLen++; s.lineLen > maxChunkLine {
				return i, fail(400, "chunk extension too long")
			}
			if c == '\r' && (s.ext == extName || s.ext == extValue || s.ext == extQuoted+2) {
				s.state = chunkSizeLF
				i++
				continue
			}
			if !s.extByte(c) {
				return i, fail(400, "invalid chunk extension")
			}
			i++
		case chunkSizeLF:
			if c != '\n' {
				return i, fail(400, "bare CR in chunk size line")
			}
			i++
			s.lineLen = 0
			if s.remaining == 0 {
				s.state = chunkTrailer
			} else {
				s.state = chunkData
			}
		case chunkData:
			n := int(min(int64(len(buf)-i), s.remaining))
			s.remaining -= int64(n)
			i += n
			if s.remaining == 0 {
				s.state = chunkDataCR
			}
		case chunkDataCR:
			if c != '\r' {
				return i, fail(400, "chunk data longer than its size")
			}
			s.state = chunkDataLF
			i++
		case chunkDataLF:
			if c != '\n' {
				return i, fail(400, "bare CR after chunk data")
			}
			s.state = chunkSize
			s.sizeDigits = 0
			i++
		case chunkTrailer:
			// RFC 9112 §7.1.2: trailer-section = *( field-line CRLF ),
			// then CRLF. A line starts with a field name; a bare LF, a
			// control character or obs-fold whitespace here is refused
			// like the same bytes in a head, or the next pipelined
			// request would be swallowed as a trailer line.
			switch {
			case c == '\r':
				s.state = chunkFinalLF
			case !tokenChars[c]:
				return i, fail(400, "invalid trailer line")
			default:
				s.state = chunkTrailerLine
				s.lineLen = 1
				s.colon = false
				s.trailers++
				if s.trailers > maxTrailers {
					return i, fail(400, "too many trailer lines")
				}
			}
			i++
		case chunkTrailerLine:
			// field-line = field-name ":" OWS field-value OWS
			switch {
			case c == '\r' && s.colon:
				s.state = chunkTrailerLF
			case c == '\r':
				return i, fail(400, "trailer line without a colon")
			case c == '\n':
				return i, fail(400, "bare LF in trailer")
			case !s.colon && c == ':':
				s.colon = true
			case !s.colon && !tokenChars[c]:
				return i, fail(400, "invalid trailer field name")
			case (c < ' ' && c != '\t') || c == 0x7f:
				return i, fail(400, "control character in trailer")
			}
			if s.lineLen++; s.lineLen > maxChunkLine {
				return i, fail(400, "trailer line too long")
			}
			i++
		case chunkTrailerLF:
			if c != '\n' {
				return i, fail(400, "bare CR in trailer")
			}
			s.state = chunkTrailer
			i++
		case chunkFinalLF:
			if c != '\n' {
				return i, fail(400, "bare CR after last chunk")
			}
			s.state = chunkDone
			i++
		}
	}
	s.total += int64(i)
	return i, nil
}

func hexVal(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

// Positions in a chunk extension.
const (
	extBWS     = iota // whitespace, then ";"
	extSemi           // after ";": whitespace, then a name
	extName           // in a name
	extNameEnd        // whitespace after a name: "=" or ";"
	extEq             // after "=": whitespace, then a value
	extValue          // in a token value
	extQuoted         // in a quoted-string; +1: after a backslash; +2: after the closing quote
)

// extByte advances the chunk extension parser by one byte other than
// the CR that ends it; false means the extension is malformed.
func (s *BodySkipper) extByte(c byte) bool {
	ws := c == ' ' || c == '\t'
	switch s.ext {
	case extBWS:
		if c == ';' {
			s.ext = extSemi
		}
		return ws || c == ';'
	case extSemi:
		if tokenChars[c] {
			s.ext = extName
		}
		return ws || tokenChars[c]
	case extName, extNameEnd:
		switch {
		case tokenChars[c] && s.ext == extName:
		case ws:
			s.ext = extNameEnd
		case c == '=':
			s.ext = extEq
		case c == ';':
			s.ext = extSemi
		default:
			return false
		}
		return true
	case extEq:
		switch {
		case ws:
		case c == '"':
			s.ext = extQuoted
		case tokenChars[c]:
			s.ext = extValue
		default:
			return false
		}
		return true
	case extValue, extQuoted + 2:
		switch {
		case tokenChars[c] && s.ext == extValue:
		case ws:
			s.ext = extBWS
		case c == ';':
			s.ext = extSemi
		default:
			return false
		}
		return true
	case extQuoted:
		switch {
		case c == '"':
			s.ext = extQuoted + 2
		case c == '\\':
			s.ext = extQuoted + 1
		case c == '\t' || c >= ' ' && c != 0x7f:
		default:
			return false
		}
		return true
	case extQuoted + 1:
		if c == '\t' || c >= ' ' && c != 0x7f {
			s.ext = extQuoted
			return true
		}
		return false
	}
	return false
}
