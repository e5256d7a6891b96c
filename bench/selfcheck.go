package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
)

// SelfCheck measures the client against an in-process source on loopback
// that answers every request from memory, as fast as a server could. It
// is a reference, not a ceiling: the source runs in the same process, on
// the same CPUs, and over TLS its encryption competes with the client's
// decryption, so a real server can be measured above it. Whether a
// figure was limited by the client is told by Report.Client: how busy
// the client was over that very run.
func SelfCheck(ctx context.Context, c Config, size int64, useTLS bool) (*Report, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	pattern := make([]byte, 1<<20)
	rand.Read(pattern)
	d, err := integrity.SumRange(repeatReader{pattern}, 0, size)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if useTLS {
		cert, err := selfsigned.New("bench self-check", time.Hour)
		if err != nil {
			return nil, err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"}})
		scheme = "https"
		c.Insecure = true
	}
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSource(cn, pattern, size)
		}
	}()
	c.URLs = []string{fmt.Sprintf("%s://%s/self-check", scheme, ln.Addr())}
	c.Protocol, c.Manifest, c.ExpectDigest, c.ExpectSize = "h1", nil, &d, size
	c.RangeLast, c.ServerPID = -1, 0
	return Run(ctx, c)
}

// repeatReader is pattern repeated forever, as an io.ReaderAt.
type repeatReader struct{ p []byte }

func (r repeatReader) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		i := int((off + int64(n)) % int64(len(r.p)))
		n += copy(b[n:], r.p[i:])
	}
	return n, nil
}

func serveSource(cn net.Conn, pattern []byte, size int64) {
	defer cn.Close()
	r := bufio.NewReaderSize(cn, 16<<10)
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
		strconv.FormatInt(size, 10) + "\r\n\r\n")
	for {
		// Read one request head.
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				break
			}
		}
		if _, err := cn.Write(head); err != nil {
			return
		}
		for left := size; left > 0; {
			n := min(left, int64(len(pattern)))
			off := (size - left) % int64(len(pattern))
			chunk := pattern[off:]
			n = min(n, int64(len(chunk)))
			if _, err := cn.Write(chunk[:n]); err != nil {
				return
			}
			left -= n
		}
	}
}
