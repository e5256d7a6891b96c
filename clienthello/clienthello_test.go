package clienthello

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// captureHello returns the bytes crypto/tls sends first as a client with
// cfg: its ClientHello, in records.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		c := tls.Client(client, cfg)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Handshake() // fails when the pipe closes
		client.Close()
	}()
	server.SetDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := server.Read(buf)
		got = append(got, buf[:n]...)
		if _, _, perr := FromRecords(got); perr != ErrIncomplete || err != nil {
			return got
		}
	}
}

// records splits a handshake message into records of at most size bytes.
func records(msg []byte, size int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(len(msg), size)
		out = append(out, recordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// message joins the handshake bytes of well-formed records.
func message(recs []byte) []byte {
	var out []byte
	for len(recs) >= 5 {
		n := int(recs[3])<<8 | int(recs[4])
		out = append(out, recs[5:5+n]...)
		recs = recs[5+n:]
	}
	return out
}

func TestFromRecords(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "Media.Example.com", NextProtos: []string{"h2", "http/1.1"}, InsecureSkipVerify: true})
	// Go offers a post-quantum key share by default: a hello of well
	// over a kilobyte.
	t.Logf("crypto/tls ClientHello: %d bytes", len(hello))
	info, n, err := FromRecords(hello)
	if err != nil || n != len(hello) || info.ServerName != "media.example.com" || !slices.Equal(info.ALPN, []string{"h2", "http/1.1"}) {
		t.Fatalf("FromRecords = %+v, %d, %v", info, n, err)
	}
	// The random follows the record header, the handshake header and
	// legacy_version.
	if !bytes.Equal(info.Random[:], hello[5+4+2:5+4+2+32]) {
		t.Errorf("Random = %x, want %x", info.Random, hello[11:43])
	}
	// Bytes after the hello (early data, the next flight) are not its.
	if _, n, err := FromRecords(append(slices.Clone(hello), 23, 3, 3, 0, 1, 0)); err != nil || n != len(hello) {
		t.Errorf("with bytes after it: n %d, %v", n, err)
	}
	// Any cut is a beginning: read more.
	for i := range len(hello) {
		if _, _, err := FromRecords(hello[:i]); err != ErrIncomplete {
			t.Fatalf("first %d bytes: %v, want ErrIncomplete", i, err)
		}
	}
	// The same message in records of 1, 100 and 700 bytes.
	msg := message(hello)
	for _, size := range []int{1, 100, 700} {
		recs := records(msg, size)
		info, n, err := FromRecords(recs)
		if err != nil || n != len(recs) || info.ServerName != "media.example.com" {
			t.Errorf("records of %d bytes: %+v, %d, %v", size, info, n, err)
		}
	}
	// QUIC carries the message alone.
	if info, err := FromHandshake(msg); err != nil || info.ServerName != "media.example.com" {
		t.Errorf("FromHandshake = %+v, %v", info, err)
	}
	if _, err := FromHandshake(msg[:len(msg)-1]); err != ErrIncomplete {
		t.Errorf("FromHandshake of a cut message: %v", err)
	}
}

func TestNoSNI(t *testing.T) {
	hello := captureHello(t, &tls.Config{InsecureSkipVerify: true}) // no ServerName: no SNI
	info, _, err := FromRecords(hello)
	if err != nil || info.ServerName != "" {
		t.Fatalf("no SNI: %+v, %v", info, err)
	}
	ip := captureHello(t, &tls.Config{ServerName: "192.0.2.1", InsecureSkipVerify: true}) // an IP is never sent as SNI
	if info, _, err := FromRecords(ip); err != nil || info.ServerName != "" {
		t.Fatalf("IP address: %+v, %v", info, err)
	}
}

func TestRefused(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "a.example", InsecureSkipVerify: true})
	msg := message(hello)
	withName := func(name string) []byte {
		i := bytes.Index(msg, []byte("a.example"))
		out := slices.Concat(msg[:i], []byte(name), msg[i+len("a.example"):])
		grow := len(name) - len("a.example")
		// The lengths around it: server_name list entry, list, extension,
		// extensions, message.
		put16 := func(at, d int) { v := int(out[at])<<8 | int(out[at+1]) + d; out[at], out[at+1] = byte(v>>8), byte(v) }
		put16(i-2, grow)
		put16(i-5, grow)
		put16(i-7, grow)
		v := int(out[1])<<16 | int(out[2])<<8 | int(out[3]) + grow
		out[1], out[2], out[3] = byte(v>>16), byte(v>>8), byte(v)
		// The extensions' length: find it by walking the body.
		r := reader(out[4:])
		r.bytes(34)
		r.vec(1)
		r.vec(2)
		r.vec(1)
		at := len(out) - len(r)
		put16(at, grow)
		return records(out, 1<<14)
	}
	if info, _, err := FromRecords(withName("B.Example.")); err != nil || info.ServerName != "b.example" {
		t.Fatalf("rewritten name: %+v, %v", info, err)
	}
	for _, tc := range []struct {
		name  string
		input []byte
		want  string
	}{
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), "not a TLS handshake"},
		{"alert record", []byte{21, 3, 3, 0, 2, 2, 40}, "not a TLS handshake"},
		{"ServerHello", records(append([]byte{2, 0, 0, 1}, 0), 100), "not ClientHello"},
		{"empty record", []byte{22, 3, 1, 0, 0}, "handshake record of 0 bytes"},
		{"record over 16 KiB", []byte{22, 3, 1, 0x40, 1}, "handshake record of 16385"},
		{"SSL 2 version", []byte{22, 2, 0, 0, 4}, "record version"},
		{"NUL in the name", withName("a\x00b.example"), "not a host name"},
		{"space in the name", withName("a b.example"), "not a host name"},
		{"empty label", withName("a..example"), "not a host name"},
		{"message longer than MaxBytes", records([]byte{1, 0, 0x40, 0}, 4), "limit is"},
		{"bytes after the hello in its record", records(append(slices.Clone(msg), 1), 1<<14), "bytes after the ClientHello"},
		{"truncated body", records(append([]byte{1, 0, 0, 3}, 3, 3, 0), 100), "malformed"},
	} {
		_, _, err := FromRecords(tc.input)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
		if tc.want == "not a TLS handshake" && !errors.Is(err, ErrNotTLS) {
			t.Errorf("%s: err %v is not ErrNotTLS", tc.name, err)
		}
	}
	// A hello over MaxBytes in records is refused as soon as that shows.
	big := records(make([]byte, MaxBytes), 1<<14)
	big[5] = typeClientHello
	if _, _, err := FromRecords(big); err == nil || err == ErrIncomplete {
		t.Errorf("over MaxBytes: %v", err)
	}
}

// FuzzFromRecords: any input gives an answer without panicking; a
// complete answer says how many bytes it took, within the input; a
// ClientHello is read the same however it is cut into records. Seeds in
// testdata/fuzz: ClientHellos crypto/tls sent (Go 1.26, with its
// post-quantum key share), with and without SNI.
func FuzzFromRecords(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		info, n, err := FromRecords(data)
		if err != nil {
			return
		}
		if n <= 0 || n > len(data) || n > MaxBytes {
			t.Fatalf("took %d bytes of %d", n, len(data))
		}
		again, err := FromHandshake(message(data[:n]))
		if err != nil || again.ServerName != info.ServerName || !slices.Equal(again.ALPN, info.ALPN) {
			t.Fatalf("records %+v, message alone %+v, %v", info, again, err)
		}
		if info.ServerName != "" && (strings.ToLower(info.ServerName) != info.ServerName || !hostName(info.ServerName)) {
			t.Fatalf("server name %q", info.ServerName)
		}
	})
}

// FuzzFromHandshake: QUIC's CRYPTO bytes, any of them (seeded from
// testdata/fuzz too).
func FuzzFromHandshake(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := FromHandshake(data)
		if err == nil && info.ServerName != "" && !hostName(info.ServerName) {
			t.Fatalf("server name %q", info.ServerName)
		}
	})
}
