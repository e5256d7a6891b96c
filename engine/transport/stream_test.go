package transport_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/transport"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/vmtest"
	"github.com/mediaship/engine/ktls"
)

// counting is a Body that is neither a file nor memory (as an upstream
// response will be): byte i is byte(i*7+seed).
type counting struct {
	n    int64
	seed byte
}

func (c counting) Len() int64 { return c.n }

func (c counting) ReadAt(bufs [][]byte, off int64) (int, error) {
	n := 0
	for _, b := range bufs {
		for i := range b {
			b[i] = byte((off+int64(n+i))*7) + c.seed
		}
		n += len(b)
	}
	return n, nil
}

func (c counting) bytes() []byte {
	b := make([]byte, c.n)
	c.ReadAt([][]byte{b}, 0)
	return b
}

// frames is a Producer that gives chunks of "frame header" bytes each
// followed by a slice of a body, a few per call, like an HTTP/2 driver.
type frames struct {
	resp   transport.Response
	body   transport.Body
	off    int64
	copied atomic.Int32
}

const frameSize = 10_000

func (f *frames) Produce(s transport.Sink, budget int) int {
	n := 0
	for f.off < f.body.Len() && n+frameSize+4 <= budget {
		k := min(frameSize, f.body.Len()-f.off)
		s.Write([]byte(fmt.Sprintf("F%03d", f.off/frameSize%1000)))
		s.Body(&f.resp, f.body, f.off, k)
		f.off += k
		n += int(k) + 4
	}
	return n
}

func (f *frames) Copied() { f.copied.Add(1) }

func (f *frames) want() []byte {
	var w bytes.Buffer
	all := make([]byte, f.body.Len())
	f.body.ReadAt([][]byte{all}, 0)
	for off := int64(0); off < f.body.Len(); off += frameSize {
		fmt.Fprintf(&w, "F%03d", off/frameSize%1000)
		w.Write(all[off:min(off+frameSize, f.body.Len())])
	}
	return w.Bytes()
}

// handler answers a connection's first line ("go\n") with a head, a file,
// a generated body, a memory body and a producer's frames, then closes.
type handler struct {
	env   *transport.Env
	file  *os.File
	size  int64
	gen   counting
	mem   []byte
	frame atomic.Pointer[frames]
}

type conn struct {
	s     *transport.Stream
	resp  transport.Response
	state int // 0 waiting, 1 writing, 2 closing
	fr    *frames
}

func (h *handler) Open(c *reactor.Conn) {
	c.State = &conn{s: h.env.Open(c)}
	c.SetReadDeadline(10 * time.Second)
}

func (h *handler) Closed(c *reactor.Conn) { c.State.(*conn).s.Closed() }
func (h *handler) Tick() bool             { return false }

func (h *handler) Serve(c *reactor.Conn) {
	st := c.State.(*conn)
	s := st.s
	if !s.Advance() || c.Closed() || !s.Ready() {
		return
	}
	switch st.state {
	case 0:
		if !bytes.HasSuffix(s.Input(), []byte("\n")) {
			return
		}
		s.Consume(len(s.Input()))
		c.SetReadDeadline(0)
		s.StartResponse(&st.resp)
		s.Write([]byte("HEAD\n"))
		s.WriteBody(&st.resp, transport.File{FD: int(h.file.Fd()), Off: 0, N: h.size})
		s.WriteBody(&st.resp, h.gen)
		s.WriteBody(&st.resp, transport.Mem(h.mem))
		st.fr = &frames{body: h.gen}
		h.frame.Store(st.fr)
		s.StartResponse(&st.fr.resp)
		s.WriteFrom(st.fr)
		st.state = 1
		fallthrough
	case 1:
		s.Pump()
		if s.Busy() {
			return
		}
		if st.fr.off < st.fr.body.Len() {
			s.WriteFrom(st.fr)
			s.Pump()
			return
		}
		st.state = 2
		s.CloseGracefully()
	}
}

func serve(t *testing.T, env *transport.Env, h *handler) string {
	t.Helper()
	h.env = env
	g, err := reactor.Listen(reactor.Config{
		Addr:       "127.0.0.1:0",
		Workers:    1,
		NoSteering: true,
		NewHandler: func(*reactor.Loop) reactor.Handler { return h },
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	go g.Run()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	return g.Addr()
}

func newHandler(t *testing.T) (*handler, []byte) {
	t.Helper()
	size := int64(3<<20 + 12345)
	data := counting{n: size, seed: 3}.bytes()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	h := &handler{file: f, size: size, gen: counting{n: 1<<20 + 777, seed: 9}, mem: []byte("the end of the first response\n")}
	want := append([]byte("HEAD\n"), data...)
	want = append(want, h.gen.bytes()...)
	want = append(want, h.mem...)
	want = append(want, (&frames{body: h.gen}).want()...)
	return h, want
}

func baseEnv() *transport.Env {
	return &transport.Env{
		HeaderTimeout: 10 * time.Second,
		InputSize:     64<<10 + 2*ktls.MaxPlaintext,
		BatchSize:     128 << 10,
		SendBuffer:    256 << 10,
		PromoteAfter:  1 << 20,
		Stats:         &transport.Stats{},
		Log:           slog.New(slog.DiscardHandler),
		Note:          func(string, ...any) {},
	}
}

// TestBodiesAndProducer sends every kind of body and a producer's frames
// through each transport this kernel has, and checks every byte.
func TestBodiesAndProducer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tls    bool
		kernel bool // try to promote (fails cleanly where the kernel has no TLS)
	}{
		{"plain", false, false},
		{"userspace TLS", true, false},
		{"TLS with promotion", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, want, st := exchange(t, tc.tls, tc.kernel)
			switch {
			case !tc.tls:
				if st.UserBytes.Load() != 0 || st.KernelBytes.Load() != 0 {
					t.Errorf("plain stream counted TLS bytes: user %d kernel %d", st.UserBytes.Load(), st.KernelBytes.Load())
				}
			case !tc.kernel:
				if n := st.UserBytes.Load(); n != int64(len(want)) {
					t.Errorf("userspace bytes %d, want %d", n, len(want))
				}
				if h.frameCopied() == 0 {
					t.Errorf("the producer was never told its bodies were copied")
				}
			default:
				// One attempt for the first response (past promote_after);
				// after a failure the connection stays in userspace.
				if p, f := st.Promotions.Load(), st.PromoteFailures.Load(); p+f != 1 {
					t.Errorf("promotions %d + failures %d, want one attempt", p, f)
				}
				if st.UserBytes.Load()+st.KernelBytes.Load() != int64(len(want)) {
					t.Errorf("user %d + kernel %d bytes, want %d", st.UserBytes.Load(), st.KernelBytes.Load(), len(want))
				}
			}
		})
	}
}

// exchange serves one connection of handler's output and checks every
// byte the client read.
func exchange(t *testing.T, useTLS, kernel bool) (*handler, []byte, *transport.Stats) {
	t.Helper()
	cert, err := selfsigned.New("localhost", time.Hour, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	h, want := newHandler(t)
	env := baseEnv()
	if useTLS {
		env.TLS = ktls.ServerConfig(&tls.Config{Certificates: []tls.Certificate{*cert}})
		env.KernelTLS = kernel
	}
	addr := serve(t, env, h)
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(60 * time.Second))
	var c net.Conn = raw
	if useTLS {
		tc := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		c = tc
	}
	if _, err := c.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read after %d bytes: %v", len(got), err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("got %d bytes, want %d; first difference at %d", len(got), len(want), i)
	}
	return h, want, env.Stats
}

func (h *handler) frameCopied() int32 { return h.frame.Load().copied.Load() }

// TestMain runs the tests; TestKernelTLSTransport may boot a VM with this
// binary as its /init (internal/vmtest).
func TestMain(m *testing.M) { os.Exit(vmtest.RunMain(m)) }
