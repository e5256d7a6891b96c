package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/integrity"
)

// chunky yields b in reads of varying sizes (as TLS records and TCP
// segments arrive), then err (io.EOF when nil).
type chunky struct {
	b   []byte
	err error
	k   int
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	c.k++
	n := min(len(p), len(c.b), []int{16384, 1, 7000, 65536, 300000}[c.k%5])
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// TestBodyReader: every body is judged as integrity.Reader would, whether
// it fits in one buffer (hashed inline) or is pipelined to the hasher,
// and wherever it goes wrong: a byte off in the first or a later buffer,
// one byte short or long, a read that fails in the middle of a buffer or
// on its boundary. One bodyReader reads every case in turn, so a failed
// body must leave nothing behind for the next.
func TestBodyReader(t *testing.T) {
	bb := bodyBuffer
	errCut := errors.New("connection cut")
	for _, size := range []int{0, 1, 1024, bb - 1, bb, bb + 1, 3*bb + 17} {
		want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		d := digestOf(want)
		type tc struct {
			name    string
			body    []byte
			readErr error
			verdict error // nil: right
		}
		cases := []tc{{"exact", want, nil, nil}, {"long", append(bytes.Clone(want), 'x'), nil, integrity.ErrTooLong}}
		if size > 0 {
			cases = append(cases,
				tc{"short", want[:size-1], nil, integrity.ErrTruncated},
				tc{"first-byte", flip(want, 0), nil, integrity.ErrMismatch},
				tc{"last-byte", flip(want, size-1), nil, integrity.ErrMismatch},
				tc{"cut", want[:size/2], errCut, integrity.ErrTruncated})
		}
		if size > 2*bb {
			cases = append(cases,
				tc{"byte-after-first-buffer", flip(want, bb), nil, integrity.ErrMismatch},
				tc{"cut-at-buffer", want[:bb], errCut, integrity.ErrTruncated},
				tc{"cut-in-second-buffer", want[:bb+bb/3], errCut, integrity.ErrTruncated},
				tc{"ends-in-second-buffer", want[:bb+bb/3], nil, integrity.ErrTruncated})
		}
		br := newBodyReader()
		for _, tt := range cases {
			for _, digest := range []*integrity.Digest{&d, nil} {
				var arrived int
				verdict, readErr := br.read(&chunky{b: tt.body, err: tt.readErr}, int64(size), digest, func(n int) { arrived += n })
				name := fmt.Sprintf("size %d %s (digest %v)", size, tt.name, digest != nil)
				wantVerdict := tt.verdict
				if digest == nil && errors.Is(wantVerdict, integrity.ErrMismatch) {
					wantVerdict = nil // length only
				}
				if !errors.Is(verdict, wantVerdict) || (wantVerdict == nil) != (verdict == nil) {
					t.Errorf("%s: verdict %v, want %v", name, verdict, wantVerdict)
				}
				if !errors.Is(readErr, tt.readErr) || (tt.readErr == nil) != (readErr == nil) {
					t.Errorf("%s: read error %v, want %v", name, readErr, tt.readErr)
				}
				// Every byte read is booked; a long body is read no
				// further than needed to know it is long.
				if wantArrived := min(len(tt.body), size+bb+1); arrived > wantArrived || arrived < min(len(tt.body), size+1) {
					t.Errorf("%s: %d bytes booked as arrived, want %d (at most %d)", name, arrived, min(len(tt.body), size+1), wantArrived)
				}
			}
		}
		br.close()
	}
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 1
	return b
}

// BenchmarkBodyRead: the read path alone, from memory in 16 KiB reads (a
// TLS record each), for a small body (hashed inline) and a large one
// (pipelined). It allocates nothing per body.
func BenchmarkBodyRead(b *testing.B) {
	for _, size := range []int{1 << 10, 100 << 20} {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		d := digestOf(body)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			br := newBodyReader()
			defer br.close()
			r := &records{}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				r.b = body
				if v, _ := br.read(r, int64(size), &d, func(int) {}); v != nil {
					b.Fatal(v)
				}
			}
		})
	}
}

// records yields b in reads of at most 16 KiB.
type records struct{ b []byte }

func (r *records) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 16<<10)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// TestStreamsKeepTheirDigests: h2 streams on one connection, each with
// its own pipelined hasher, fetch two different large files at once; a
// digest that mixed one stream's bytes into another's would fail them.
func TestStreamsKeepTheirDigests(t *testing.T) {
	files := map[string][]byte{
		"a.bin": bytes.Repeat([]byte("stream a "), (1<<20)/9),
		"b.bin": bytes.Repeat([]byte("stream b, longer line "), (3*bodyBuffer+5)/22),
	}
	var manifest []integrity.Entry
	for name, b := range files {
		manifest = append(manifest, integrity.Entry{Path: name, Digest: digestOf(b)})
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := files[strings.TrimPrefix(r.URL.Path, "/")]
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	r, err := Run(context.Background(), Config{URLs: []string{s.URL + "/a.bin", s.URL + "/b.bin"}, Protocol: "h2", Connections: 1, Streams: 8,
		Samples: 2, Duration: time.Second, Manifest: manifest, ExpectSize: -1, RangeLast: -1, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Accepted != 2 || len(r.Errors) != 0 || r.ConnectionsOpened != 1 || r.Latency.Count < 16 {
		t.Errorf("accepted %d, errors %v, %d connections, %d responses: want 2, none, 1, at least 16", r.Accepted, r.Errors, r.ConnectionsOpened, r.Latency.Count)
	}
}
