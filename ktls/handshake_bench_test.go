package ktls

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// BenchmarkHandshake compares a TLS 1.3 server handshake run by
// crypto/tls alone (tls.Server on a net.Conn) with the same handshake
// driven the engine's way (ServerConfig's per-connection config and key
// log, StartHandshake's goroutine fed one record at a time, the session's
// keys and the sequence number found by decryption), against the same
// crypto/tls client over net.Pipe. Both figures include the client's
// work; their difference is what the engine adds. The client offers
// X25519 only, as OpenSSL 3.0 clients (curl, wrk, h2load) do.
func BenchmarkHandshake(b *testing.B) {
	cert, pool := testCert(b)
	base := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
	engine := ServerConfig(base)
	for _, resume := range []bool{false, true} {
		name := "full"
		if resume {
			name = "resumed"
		}
		client := &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"http/1.1"},
			CurvePreferences: []tls.CurveID{tls.X25519}}
		if resume {
			client.ClientSessionCache = tls.NewLRUClientSessionCache(1)
		}
		b.Run("crypto-tls/"+name, func(b *testing.B) {
			server := base.Clone()
			b.ReportAllocs()
			for b.Loop() {
				handshakeOnce(b, client, func(c net.Conn) error {
					s := tls.Server(c, server)
					err := s.Handshake()
					b := make([]byte, 1)
					if err == nil {
						_, err = io.ReadFull(s, b)
					}
					if err == nil {
						_, err = s.Write(b)
					}
					return err
				})
			}
		})
		b.Run("engine/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				handshakeOnce(b, client, func(c net.Conn) error {
					raw := readChunks(c)
					s, rest, err := driveHandshake(c, raw, engine)
					if err != nil {
						return err
					}
					open, _ := NewOpener(s.Read, s.ReadSeq)
					seal, _ := NewSealer(s.Write, s.WriteSeq)
					for {
						rec, err := open.Open(rest)
						if err != nil {
							return err
						}
						if rec != nil {
							out, err := seal.Seal(nil, RecordApplicationData, rec.Data)
							if err == nil {
								_, err = c.Write(out)
							}
							return err
						}
						more, ok := <-raw
						if !ok {
							return io.ErrUnexpectedEOF
						}
						rest = append(rest, more...)
					}
				})
			}
		})
	}
}

// handshakeOnce runs one client handshake against serve, sends a byte
// and reads the echo, and waits for both ends.
func handshakeOnce(b *testing.B, client *tls.Config, serve func(net.Conn) error) {
	cc, sc := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- serve(sc); sc.Close() }()
	c := tls.Client(cc, client)
	if err := c.Handshake(); err != nil {
		b.Fatal(err)
	}
	// One byte each way: the server's answer comes after its session
	// ticket, which the client reads on the way.
	if _, err := c.Write([]byte{'x'}); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	cc.Close()
}

// readChunks reads c on a goroutine until it fails.
func readChunks(c net.Conn) chan []byte {
	raw := make(chan []byte, 16)
	go func() {
		for {
			b := make([]byte, 4096)
			n, err := c.Read(b)
			if n > 0 {
				raw <- b[:n]
			}
			if err != nil {
				close(raw)
				return
			}
		}
	}()
	return raw
}

// driveHandshake plays the reactor's part for one handshake on c: whole
// records from raw in on Want, output out, until Done. It returns the
// session and the bytes read past the handshake.
func driveHandshake(c net.Conn, raw chan []byte, cfg *tls.Config) (*Session, []byte, error) {
	ev := make(chanIO, 4)
	var h *Handshake
	var buf []byte
	wanted := false
	for {
		n := RecordLen(buf)
		switch {
		case n == 0 || len(buf) < n:
		case h == nil:
			h = StartHandshake(cfg, ev, nil, nil, bytes.Clone(buf[:n]))
			buf = buf[n:]
			continue
		case wanted:
			h.Feed(bytes.Clone(buf[:n]))
			buf = buf[n:]
			wanted = false
			continue
		}
		select {
		case e := <-ev:
			if _, err := c.Write(e.data); err != nil {
				return nil, nil, err
			}
			if e.kind == "done" {
				return e.s, buf, e.err
			}
			wanted = true
		case b, ok := <-raw:
			if !ok {
				return nil, nil, io.ErrUnexpectedEOF
			}
			buf = append(buf, b...)
		}
	}
}
