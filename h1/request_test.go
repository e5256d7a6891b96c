package h1

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func parse(t testing.TB, in string) (*Request, int, error) {
	t.Helper()
	p := NewParser(Limits{MaxHeadBytes: 4096, MaxHeaders: 20, MaxTargetBytes: 512})
	var r Request
	n, err := p.Parse([]byte(in), &r)
	return &r, n, err
}

func status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		in                 string
		method, path, host string
		query              string
		minor              int
		close              bool
		cl                 int64
		chunked            bool
	}{
		{in: "GET / HTTP/1.1\r\nHost: a\r\n\r\n", method: "GET", path: "/", host: "a", minor: 1, cl: -1},
		{in: "GET /x?y=1 HTTP/1.1\r\nHost: a:80\r\n\r\n", method: "GET", path: "/x", query: "y=1", host: "a:80", minor: 1, cl: -1},
		{in: "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", method: "GET", path: "/", host: "a", minor: 1, cl: -1},
		{in: "GET / HTTP/1.0\r\n\r\n", method: "GET", path: "/", minor: 0, close: true, cl: -1},
		{in: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", method: "GET", path: "/", minor: 0, cl: -1},
		{in: "GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n", method: "GET", path: "/", host: "a", minor: 1, close: true, cl: -1},
		{in: "GET http://b.example/p?q HTTP/1.1\r\nHost: a\r\n\r\n", method: "GET", path: "/p", query: "q", host: "b.example", minor: 1, cl: -1},
		{in: "GET http://b.example HTTP/1.1\r\nHost: a\r\n\r\n", method: "GET", path: "/", host: "b.example", minor: 1, cl: -1},
		{in: "POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", method: "POST", path: "/u", host: "a", minor: 1, cl: 5},
		{in: "POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", method: "POST", path: "/u", host: "a", minor: 1, cl: -1, chunked: true},
		{in: "GET / HTTP/1.1\r\nHost: [::1]:8080\r\nX:  spaced value \t\r\n\r\n", method: "GET", path: "/", host: "[::1]:8080", minor: 1, cl: -1},
		{in: "GET / HTTP/1.1\r\nHost:\r\n\r\n", method: "GET", path: "/", host: "", minor: 1, cl: -1},
	}
	for _, tt := range tests {
		r, n, err := parse(t, tt.in)
		if err != nil {
			t.Errorf("parse(%q) error %v", tt.in, err)
			continue
		}
		if n != len(tt.in) {
			t.Errorf("parse(%q) used %d bytes, want %d", tt.in, n, len(tt.in))
		}
		if string(r.Method) != tt.method || string(r.Path) != tt.path || string(r.Host) != tt.host ||
			string(r.Query) != tt.query || r.Minor != tt.minor || r.Close != tt.close ||
			r.ContentLength != tt.cl || r.Chunked != tt.chunked {
			t.Errorf("parse(%q) = method %q path %q query %q host %q minor %d close %v cl %d chunked %v; want %q %q %q %q %d %v %d %v",
				tt.in, r.Method, r.Path, r.Query, r.Host, r.Minor, r.Close, r.ContentLength, r.Chunked,
				tt.method, tt.path, tt.query, tt.host, tt.minor, tt.close, tt.cl, tt.chunked)
		}
	}
}

func TestParseHeaderValue(t *testing.T) {
	r, _, err := parse(t, "GET / HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced value \t\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.Get("x-thing")); got != "spaced value" {
		t.Errorf("Get(x-thing) = %q, want %q", got, "spaced value")
	}
}

// TestParseRejects covers malformed heads and the request smuggling vectors
// RFC 9112 tells a server to refuse.
func TestParseRejects(t *testing.T) {
	long := strings.Repeat("a", 600)
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", 400},
		{"space after request line", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400},
		{"bare CR in header", "GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n", 400},
		{"bare CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
		{"invalid name char", "GET / HTTP/1.1\r\nHo(st: a\r\n\r\n", 400},
		{"NUL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400},
		{"no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", 400},
		{"invalid method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"tab separator", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505},
		{"HTTP/0.9 style", "GET /\r\n\r\n", 400},
		{"missing host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"double host", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"bad host slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400},
		{"double CL", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
		{"conflicting CL", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
		{"CL list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n", 400},
		{"CL sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", 400},
		{"CL negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
		{"CL hex", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", 400},
		{"CL huge", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
		{"TE and CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"TE twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"TE gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"TE gzip chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"TE chunked padded name", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
		{"TE in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"control in target", "GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"non-ascii target", "GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"long target", "GET /" + long + " HTTP/1.1\r\nHost: a\r\n\r\n", 414},
		{"long target incomplete", "GET /" + long + long, 414},
		{"head too large", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-A: "+long+"\r\n", 8), 431},
		{"too many headers", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: 1\r\n", 25) + "\r\n", 431},
		{"bad absolute authority", "GET http://a b/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	}
	for _, tt := range tests {
		_, _, err := parse(t, tt.in)
		if got := status(err); got != tt.want {
			t.Errorf("%s: parse(%q) status %d (err %v), want %d", tt.name, tt.in, got, err, tt.want)
		}
	}
}

func TestParseIncomplete(t *testing.T) {
	full := "GET /a HTTP/1.1\r\nHost: a\r\nX: y\r\n\r\n"
	for i := 0; i < len(full); i++ {
		_, _, err := parse(t, full[:i])
		if err != ErrIncomplete {
			t.Errorf("parse(%q) = %v, want ErrIncomplete", full[:i], err)
		}
	}
}

func TestParsePipelined(t *testing.T) {
	in := []byte("GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
	p := NewParser(Limits{})
	var r Request
	n, err := p.Parse(in, &r)
	if err != nil || string(r.Path) != "/1" {
		t.Fatalf("first: %v %q", err, r.Path)
	}
	n2, err := p.Parse(in[n:], &r)
	if err != nil || string(r.Path) != "/2" || n+n2 != len(in) {
		t.Fatalf("second: %v %q %d", err, r.Path, n2)
	}
}

func TestChunkedSkip(t *testing.T) {
	tests := []struct {
		body string
		ok   bool
	}{
		{"0\r\n\r\n", true},
		{"5\r\nhello\r\n0\r\n\r\n", true},
		{"5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n", true},
		{"5 ;ext\r\nhello\r\n0\r\n\r\n", true},
		{"x\r\n", false},
		{"\r\n", false},
		{"-1\r\n", false},
		{"5\r\nhelloX\r\n", false},
		{"5\nhello\r\n", false},
		{"1000000000000000\r\n", false},
		{"5\r\nhello\r\n0\r\nT: x\n\r\n", false},
		{"0\r\n\rX", false},
		{"0\r\n\n", false},                       // bare LF where the trailer section starts
		{"0\r\n\nGET / HTTP/1.1\r\n\r\n", false}, // ...swallowing the next request
		{"0\r\n T: folded\r\n\r\n", false},       // obs-fold
		{"0\r\n:x\r\n\r\n", false},               // no field name
		{"0\r\nT: a\x01b\r\n\r\n", false},        // control character
		{"0\r\nT: a\tb\r\nU: c\r\n\r\n", true},
		{"0\r\nbad trailer\r\n\r\n", false}, // no colon
		{"0\r\nT : x\r\n\r\n", false},       // whitespace in the name
		{"5 \r\nhello\r\n0\r\n\r\n", false}, // whitespace without an extension
		{"5\t\r\nhello\r\n0\r\n\r\n", false},
		{"5;\r\nhello\r\n0\r\n\r\n", false},      // ";" without a name
		{"5;x \r\nhello\r\n0\r\n\r\n", false},    // trailing whitespace
		{"5;x=\r\nhello\r\n0\r\n\r\n", false},    // "=" without a value
		{"5;x=\"a\r\nhello\r\n0\r\n\r\n", false}, // unterminated quoted-string
		{"5;x=\"a b\\\"c\"\r\nhello\r\n0\r\n\r\n", true},
		{"5 ; x = y ;z\r\nhello\r\n0\r\n\r\n", true}, // BWS around ";" and "="
		{"5;x=y\x01\r\nhello\r\n0\r\n\r\n", false},
	}
	for _, tt := range tests {
		// Feed byte by byte to exercise every state boundary.
		var s BodySkipper
		s.Reset(&Request{Chunked: true})
		var err error
		in := []byte(tt.body + "NEXT")
		used := 0
		for used < len(in) && !s.Done() && err == nil {
			var n int
			n, err = s.Skip(in[used : used+1])
			used += n
			if n == 0 && err == nil {
				t.Fatalf("Skip(%q) made no progress", tt.body)
			}
		}
		if ok := err == nil && s.Done(); ok != tt.ok {
			t.Errorf("skip(%q): done=%v err=%v, want ok=%v", tt.body, s.Done(), err, tt.ok)
		}
		if tt.ok && string(in[used:]) != "NEXT" {
			t.Errorf("skip(%q) left %q, want NEXT", tt.body, in[used:])
		}
	}
}

func TestContentLengthSkip(t *testing.T) {
	var s BodySkipper
	s.Reset(&Request{ContentLength: 3})
	n, _ := s.Skip([]byte("abcdef"))
	if n != 3 || !s.Done() {
		t.Errorf("Skip = %d done=%v, want 3 true", n, s.Done())
	}
}

func TestResponseHead(t *testing.T) {
	b := AppendStatusLine(nil, 206)
	b = AppendHeaderInt(b, "Content-Length", 42)
	b = AppendHeader(b, "Accept-Ranges", "bytes")
	want := "HTTP/1.1 206 Partial Content\r\nContent-Length: 42\r\nAccept-Ranges: bytes\r\n"
	if string(b) != want {
		t.Errorf("head = %q, want %q", b, want)
	}
}

func BenchmarkParse(b *testing.B) {
	in := []byte("GET /models/llama/weights-00001-of-00008.safetensors HTTP/1.1\r\nHost: media.example.com\r\n" +
		"User-Agent: curl/8.5.0\r\nAccept: */*\r\nRange: bytes=0-1048575\r\nConnection: keep-alive\r\n\r\n")
	p := NewParser(Limits{})
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := p.Parse(in, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	in := []byte("GET /x HTTP/1.1\r\nHost: a\r\nRange: bytes=0-1\r\nConnection: keep-alive\r\n\r\n")
	p := NewParser(Limits{})
	var r Request
	p.Parse(in, &r) // first call may size the header slice
	allocs := testing.AllocsPerRun(100, func() { p.Parse(in, &r) })
	if allocs != 0 {
		t.Errorf("Parse allocates %v times per request, want 0", allocs)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /x?y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"GET http://h/p HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1,5-\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p := NewParser(Limits{MaxHeadBytes: 1024, MaxHeaders: 16, MaxTargetBytes: 256})
		var r Request
		n, err := p.Parse(in, &r)
		if err != nil {
			var e *Error
			if err != ErrIncomplete && !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			if e != nil && (e.Status < 400 || e.Status > 505) {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		if n <= 0 || n > len(in) || !bytes.HasSuffix(in[:n], []byte("\r\n\r\n")) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		if r.Minor == 1 && r.Host == nil {
			t.Fatalf("HTTP/1.1 request without Host accepted")
		}
		if r.Chunked && r.ContentLength >= 0 {
			t.Fatalf("both chunked and Content-Length accepted")
		}
		for _, h := range r.Headers {
			if bytes.ContainsAny(h.Value, "\r\n\x00") || !isToken(h.Name) {
				t.Fatalf("header %q: %q accepted", h.Name, h.Value)
			}
		}
		if r.HasBody() {
			var s BodySkipper
			s.Reset(&r)
			s.Skip(in[n:])
		}
	})
}

// FuzzBodySkipper feeds a chunked body in two pieces split anywhere: the
// skipper must consume the same bytes and reach the same verdict as with
// the whole input, never read past the body's end, and accept only bodies
// whose framing a strict reading of RFC 9112 §7.1 accepts.
func FuzzBodySkipper(f *testing.F) {
	for _, s := range []string{"0\r\n\r\n", "5\r\nhello\r\n0\r\nT: x\r\n\r\nGET", "0\r\n\nGET", "3;a=b\r\nabc\r\n0\r\n\r\n"} {
		f.Add([]byte(s), uint(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint) {
		skip := func(parts ...[]byte) (int, bool, error) {
			var s BodySkipper
			s.Reset(&Request{Chunked: true})
			used := 0
			for _, p := range parts {
				n, err := s.Skip(p)
				used += n
				if err != nil {
					return used, false, err
				}
				if s.Done() {
					return used, true, nil
				}
			}
			return used, s.Done(), nil
		}
		whole, done, err := skip(in)
		k := int(cut % uint(len(in)+1))
		split, done2, err2 := skip(in[:k], in[k:])
		if (err == nil) != (err2 == nil) || done != done2 || (done && whole != split) {
			t.Fatalf("whole: %d %v %v; split at %d: %d %v %v", whole, done, err, k, split, done2, err2)
		}
		if !done {
			return
		}
		body := in[:whole]
		if !bytes.HasSuffix(body, []byte("\r\n\r\n")) {
			t.Fatalf("accepted body %q does not end with an empty line", body)
		}
		for i, c := range body {
			if c == '\n' && (i == 0 || body[i-1] != '\r') {
				// A LF inside chunk data is data; outside it, framing.
				if !inChunkData(body, i) {
					t.Fatalf("accepted bare LF at %d in %q", i, body)
				}
			}
		}
	})
}

// inChunkData reports whether byte i of a well-formed chunked body lies
// inside chunk data.
func inChunkData(body []byte, i int) bool {
	pos := 0
	for pos < len(body) {
		eol := bytes.Index(body[pos:], []byte("\r\n"))
		if eol < 0 {
			return false
		}
		line := body[pos : pos+eol]
		if j := bytes.IndexAny(line, "; \t"); j >= 0 {
			line = line[:j]
		}
		var size int64
		for _, c := range line {
			size = size<<4 | int64(hexVal(c))
		}
		start := pos + eol + 2
		if size == 0 {
			return false
		}
		if i >= start && i < start+int(size) {
			return true
		}
		pos = start + int(size) + 2
	}
	return false
}
