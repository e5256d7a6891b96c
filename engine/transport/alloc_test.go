package transport_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/transport"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/ktls"
)

// fileHandler answers each "go\n" with a whole file, over and over.
type fileHandler struct {
	env  *transport.Env
	fd   int
	size int64
}

type fileConn struct {
	s    *transport.Stream
	resp transport.Response
	busy bool
}

func (h *fileHandler) Open(c *reactor.Conn)   { c.State = &fileConn{s: h.env.Open(c)} }
func (h *fileHandler) Closed(c *reactor.Conn) { c.State.(*fileConn).s.Closed() }

func (h *fileHandler) Serve(c *reactor.Conn) {
	st := c.State.(*fileConn)
	s := st.s
	if !s.Advance() || c.Closed() || !s.Ready() {
		return
	}
	if st.busy {
		s.Pump()
		if st.busy = s.Busy(); st.busy {
			return
		}
	}
	for len(s.Input()) >= 3 {
		s.Consume(3)
		s.StartResponse(&st.resp)
		s.WriteBody(&st.resp, transport.File{FD: h.fd, N: h.size})
		s.Pump()
		if st.busy = s.Busy(); st.busy {
			return
		}
	}
	if s.EOF() {
		s.CloseGracefully()
	}
}

// sealedTransfer serves size-byte files over userspace TLS, n times on
// one connection, to a client that discards them; it returns the
// process's heap allocations during the transfers and the batches sealed.
func sealedTransfer(tb testing.TB, size int64, n int) (mallocs uint64, batches int64) {
	cert, err := selfsigned.New("localhost", time.Hour, "localhost")
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	path := filepath.Join(tb.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	env := baseEnv()
	env.TLS = ktls.ServerConfig(&tls.Config{Certificates: []tls.Certificate{*cert}})
	h := &fileHandler{fd: int(f.Fd()), size: size}
	h.env = env
	g, err := reactor.Listen(reactor.Config{Addr: "127.0.0.1:0", Workers: 1, NoSteering: true,
		NewHandler: func(*reactor.Loop) reactor.Handler { return h }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	go g.Run()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	}()
	raw, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(60 * time.Second))
	c := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	buf := make([]byte, 256<<10)
	// After the first response (read through crypto/tls, which takes the
	// session ticket too), responses are read raw: record headers are
	// walked and the ciphertext dropped undecrypted, so the client adds
	// no allocations of its own to the count.
	decrypt := true
	get := func() {
		if _, err := c.Write([]byte("go\n")); err != nil {
			tb.Fatal(err)
		}
		if decrypt {
			decrypt = false
			for left := size; left > 0; {
				k, err := c.Read(buf[:min(int64(len(buf)), left)])
				if err != nil {
					tb.Fatal(err)
				}
				left -= int64(k)
			}
			return
		}
		// Each TLS 1.3 record carries its length minus 17 (content type
		// and tag) bytes of plaintext.
		var hdr [5]byte
		for left := size; left > 0; {
			if _, err := io.ReadFull(raw, hdr[:]); err != nil {
				tb.Fatal(err)
			}
			n := int(hdr[3])<<8 | int(hdr[4])
			if _, err := io.ReadFull(raw, buf[:n]); err != nil {
				tb.Fatal(err)
			}
			left -= int64(n - 17)
		}
	}
	get() // the handshake, first buffers, the client's record buffers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b0 := env.Stats.UserBatches.Load()
	for range n {
		get()
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, env.Stats.UserBatches.Load() - b0
}

// TestSealBatchAllocations: sealing a file in userspace allocates nothing
// per batch (buffers come from the loop's pool). The count is the whole
// process's, client included, so a few allocations of the runtime or the
// client are allowed; one per batch is not.
func TestSealBatchAllocations(t *testing.T) {
	mallocs, batches := sealedTransfer(t, 32<<20, 4)
	t.Logf("%d allocations in %d batches", mallocs, batches)
	if batches < 4*(32<<20)/(128<<10) {
		t.Fatalf("%d batches for 128 MiB", batches)
	}
	if mallocs > uint64(batches)/10 {
		t.Errorf("%d allocations in %d batches: sealing allocates per batch", mallocs, batches)
	}
}

// BenchmarkSealedFile reports the allocations per sealed batch (and the
// throughput, client included) of a 64 MiB file over userspace TLS.
func BenchmarkSealedFile(b *testing.B) {
	const size = 64 << 20
	b.SetBytes(size)
	mallocs, batches := sealedTransfer(b, size, b.N)
	b.ReportMetric(float64(mallocs)/float64(max(batches, 1)), "allocs/batch")
	b.ReportMetric(float64(size*int64(b.N))/float64(max(batches, 1)), "bytes/batch")
}
