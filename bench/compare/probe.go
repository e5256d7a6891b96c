package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/integrity"
)

// probeResponse sends, once, the request that a client unable to hash
// bodies will send many times: wrk's "GET /path HTTP/1.1" with a Host
// header, or with http10 s_time's "GET /path HTTP/1.0" without one. It
// checks the response (status 200, Content-Length the file's size, the
// body's BLAKE3 digest; with http10, nothing after the body before the
// server closes) and returns its whole length in bytes, head and body:
// the yardstick for the byte counts those clients report.
func probeResponse(ctx context.Context, u *url.URL, http10 bool, size int64, want integrity.Digest) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	nd := &net.Dialer{}
	var conn net.Conn
	var err error
	if u.Scheme == "https" {
		td := &tls.Dialer{NetDialer: nd, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}
		conn, err = td.DialContext(ctx, "tcp", u.Host)
	} else {
		conn, err = nd.DialContext(ctx, "tcp", u.Host)
	}
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	if http10 {
		req = "GET " + u.RequestURI() + " HTTP/1.0\r\n\r\n"
	}
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	return readProbe(bufio.NewReader(conn), http10, size, want)
}

// readProbe reads and checks one response; see probeResponse.
func readProbe(br *bufio.Reader, toClose bool, size int64, want integrity.Digest) (int64, error) {
	var head int64
	length := int64(-1)
	status := ""
	for {
		line, err := br.ReadString('\n')
		head += int64(len(line))
		if err != nil {
			return 0, fmt.Errorf("response head: %w", err)
		}
		if status == "" {
			status = strings.TrimSpace(line)
			if f := strings.Fields(status); len(f) < 2 || f[1] != "200" {
				return 0, fmt.Errorf("status line %q, want 200", status)
			}
			continue
		}
		if line == "\r\n" || line == "\n" {
			break
		}
		name, value, _ := strings.Cut(line, ":")
		if strings.EqualFold(strings.TrimSpace(name), "content-length") {
			if length, err = strconv.ParseInt(strings.TrimSpace(value), 10, 64); err != nil {
				return 0, fmt.Errorf("content-length %q", strings.TrimSpace(value))
			}
		}
	}
	if length != size {
		return 0, fmt.Errorf("content-length %d, want %d", length, size)
	}
	h := blake3.New()
	if n, err := io.CopyN(h, br, size); err != nil {
		return 0, fmt.Errorf("body: %d of %d bytes: %w", n, size, err)
	}
	var got integrity.Digest
	h.Sum(got[:0])
	if got != want {
		return 0, fmt.Errorf("body digest %s, want %s", got, want)
	}
	if toClose {
		if extra, _ := io.Copy(io.Discard, br); extra > 0 {
			return 0, fmt.Errorf("%d bytes after the body before the server closed", extra)
		}
	}
	return head + size, nil
}
