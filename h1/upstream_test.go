package h1

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseResponse(t *testing.T) {
	p := NewParser(Limits{})
	ok := []struct {
		in                     string
		status                 int
		cl                     int64
		chunked, close, follow bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, 5, false, false, true},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, -1, true, false, true},
		{"HTTP/1.1 200 OK\r\n\r\n", 200, -1, false, true, true}, // until close
		{"HTTP/1.1 204 No Content\r\n\r\n", 204, -1, false, false, false},
		{"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", 304, -1, false, false, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", 200, 1, false, true, true},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n", 200, 1, false, false, true},
		{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 200, 0, false, true, true},
		{"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", 404, 0, false, false, true},
		{"HTTP/1.1 100 Continue\r\n\r\n", 100, -1, false, false, false},
	}
	for _, tt := range ok {
		var r Response
		n, err := p.ParseResponse([]byte(tt.in), &r)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if end := strings.Index(tt.in, "\r\n\r\n") + 4; n != end {
			t.Errorf("%q: used %d, want %d", tt.in, n, end)
		}
		if r.Status != tt.status || r.ContentLength != tt.cl || r.Chunked != tt.chunked || r.Close != tt.close || r.BodyFollows(false) != tt.follow {
			t.Errorf("%q: %+v", tt.in, r)
		}
	}
	bad := []string{
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 99 X\r\n\r\n",
		"HTTP/1.1 2000 X\r\n\r\n",
		"HTTP/1.2 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX : a\r\n\r\n",
		"HTTP/1.1 200 OK\nX: a\r\n\r\n",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 O\x01K\r\n\r\n",
		"garbage\r\n\r\n",
	}
	for _, in := range bad {
		var r Response
		_, err := p.ParseResponse([]byte(in), &r)
		var e *Error
		if !errors.As(err, &e) || e.Status != 502 {
			t.Errorf("%q: %v, want a 502 error", in, err)
		}
	}
	var r Response
	if _, err := p.ParseResponse([]byte("HTTP/1.1 200 OK\r\nContent-Le"), &r); err != ErrIncomplete {
		t.Errorf("partial head: %v", err)
	}
	big := "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 20000)
	if _, err := p.ParseResponse([]byte(big), &r); err == nil || err == ErrIncomplete {
		t.Errorf("oversized head: %v", err)
	}
}

// readAll runs a BodyReader over parts as they would arrive, and returns
// the data, the bytes used, and whether the body ended.
func readAll(b *BodyReader, parts ...[]byte) ([]byte, int, bool, error) {
	var data []byte
	used := 0
	for _, p := range parts {
		for len(p) > 0 && !b.Done() {
			n, d, err := b.Read(p)
			data = append(data, d...)
			used += n
			p = p[n:]
			if err != nil {
				return data, used, false, err
			}
			if n == 0 {
				break
			}
		}
	}
	return data, used, b.Done(), nil
}

func TestBodyReader(t *testing.T) {
	var b BodyReader
	b.ResetResponse(&Response{Chunked: true, ContentLength: -1})
	in := []byte("5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nT: x\r\n\r\nHTTP/1.1 next")
	for cut := 0; cut <= len(in); cut++ {
		b.ResetResponse(&Response{Chunked: true, ContentLength: -1})
		data, used, done, err := readAll(&b, in[:cut], in[cut:])
		if err != nil || !done || string(data) != "hello world" || string(in[used:]) != "HTTP/1.1 next" {
			t.Fatalf("cut %d: %q used %d done %v err %v", cut, data, used, done, err)
		}
	}
	b.ResetResponse(&Response{ContentLength: 3})
	if data, used, done, _ := readAll(&b, []byte("abcdef")); string(data) != "abc" || used != 3 || !done {
		t.Errorf("content-length: %q %d %v", data, used, done)
	}
	b.ResetResponse(&Response{ContentLength: -1})
	if data, _, done, _ := readAll(&b, []byte("abc"), []byte("def")); string(data) != "abcdef" || done || !b.UntilEOF() {
		t.Errorf("until close: %q %v", data, done)
	}
	b.ResetRequest(&Request{Chunked: true, ContentLength: -1})
	if _, _, _, err := readAll(&b, []byte("5\r\nhelloX\r\n")); err == nil {
		t.Errorf("chunk longer than its size accepted")
	}
}

func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.0 304 Not Modified\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 502\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p := NewParser(Limits{MaxHeadBytes: 1024, MaxHeaders: 16})
		var r Response
		n, err := p.ParseResponse(in, &r)
		if err != nil {
			var e *Error
			if err != ErrIncomplete && (!errors.As(err, &e) || e.Status != 502) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if n <= 0 || n > len(in) || !bytes.HasSuffix(in[:n], []byte("\r\n\r\n")) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		if r.Status < 100 || r.Status > 599 || r.Chunked && r.ContentLength >= 0 {
			t.Fatalf("accepted %+v", r)
		}
		if r.UntilClose() && r.BodyFollows(false) && !r.Close {
			t.Fatalf("a body delimited by close on a connection kept open")
		}
		// The body reader never reads past the end of the body.
		if r.BodyFollows(false) {
			var b BodyReader
			b.ResetResponse(&r)
			rest := in[n:]
			for len(rest) > 0 && !b.Done() {
				k, d, err := b.Read(rest)
				if k > len(rest) || len(d) > k || err != nil || k == 0 {
					break
				}
				rest = rest[k:]
			}
		}
	})
}

// TestBodyReaderFraming: Read reports the input it used even when it
// holds no data (a chunk-size line, the last chunk), so a caller that
// consumes exactly what Read used never re-reads framing.
func TestBodyReaderFraming(t *testing.T) {
	in := []byte("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	for step := 1; step <= len(in); step++ {
		var b BodyReader
		b.ResetRequest(&Request{Chunked: true, ContentLength: -1})
		var data []byte
		pos, avail := 0, 0
		for !b.Done() && pos < len(in) {
			if avail < len(in) {
				avail = min(avail+step, len(in)) // bytes arrive step at a time
			}
			n, d, err := b.Read(in[pos:avail])
			if err != nil {
				t.Fatalf("step %d at %d: %v", step, pos, err)
			}
			data = append(data, d...)
			pos += n
		}
		if string(data) != "abcde" || !b.Done() || pos != len(in) {
			t.Fatalf("step %d: %q done %v used %d of %d", step, data, b.Done(), pos, len(in))
		}
	}
}

func TestBodyReaderTrailers(t *testing.T) {
	in := []byte("3\r\nabc\r\n0\r\nChecksum: x1\r\nX-Done:  yes\r\n\r\nNEXT")
	for cut := 0; cut <= len(in); cut++ {
		var b BodyReader
		b.ResetResponse(&Response{Chunked: true, ContentLength: -1})
		data, used, done, err := readAll(&b, in[:cut], in[cut:])
		if err != nil || !done || string(data) != "abc" || string(in[used:]) != "NEXT" ||
			string(b.Trailers()) != "Checksum: x1\r\nX-Done:  yes\r\n" {
			t.Fatalf("cut %d: %q %q done %v err %v", cut, data, b.Trailers(), done, err)
		}
	}
	var b BodyReader
	b.ResetResponse(&Response{Chunked: true, ContentLength: -1})
	if _, _, done, _ := readAll(&b, []byte("0\r\n\r\n")); !done || b.Trailers() != nil && len(b.Trailers()) != 0 {
		t.Errorf("no trailers: %q", b.Trailers())
	}
}
