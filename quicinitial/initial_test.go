package quicinitial

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mediaship/engine/clienthello"
)

// TestInitialKeys: RFC 9001 Appendix A.1's client Initial keys.
func TestInitialKeys(t *testing.T) {
	dcid, _ := hex.DecodeString("8394c8f03e515708")
	initial, err := hkdf.Extract(sha256.New, dcid, salt1)
	if err != nil {
		t.Fatal(err)
	}
	secret := expandLabel(initial, "client in", 32)
	for _, tc := range []struct {
		label, want string
		n           int
	}{
		{"quic key", "1f369613dd76d5467730efcbe3b1a22d", 16},
		{"quic iv", "fa044b2f42a3fd3b46fb255c", 12},
		{"quic hp", "9f50449e04a0e810283a1e9933adedd2", 16},
	} {
		if got := hex.EncodeToString(expandLabel(secret, tc.label, tc.n)); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.label, got, tc.want)
		}
	}
}

// clientDatagrams runs quic-go's client against a UDP socket that never
// answers and returns the datagrams it sent within the wait.
func clientDatagrams(t *testing.T, sni string, version quic.Version, wait time.Duration) [][]byte {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	go quic.DialAddr(ctx, pc.LocalAddr().String(), &tls.Config{ServerName: sni, NextProtos: []string{"h3"}},
		&quic.Config{Versions: []quic.Version{version}})
	var out [][]byte
	buf := make([]byte, 2048)
	pc.SetReadDeadline(time.Now().Add(wait))
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return out
		}
		out = append(out, slices.Clone(buf[:n]))
	}
}

func TestQUICGoClient(t *testing.T) {
	for _, v := range []quic.Version{quic.Version1, quic.Version2} {
		ds := clientDatagrams(t, "Media.Example.COM", v, 700*time.Millisecond)
		if len(ds) == 0 {
			t.Fatalf("version %v: the client sent nothing", v)
		}
		var h Hello
		var info clienthello.Info
		err := clienthello.ErrIncomplete
		used := 0
		for _, d := range ds {
			if _, ok := Peek(d); !ok {
				t.Fatalf("version %v: Peek refused the client's datagram", v)
			}
			used++
			if info, err = h.Add(d); err != clienthello.ErrIncomplete {
				break
			}
		}
		if err != nil || info.ServerName != "media.example.com" || !slices.Equal(info.ALPN, []string{"h3"}) {
			t.Fatalf("version %v: %+v, %v after %d of %d datagrams", v, info, err, used, len(ds))
		}
		t.Logf("version %v: the ClientHello took %d datagram(s) (%d bytes the first)", v, used, len(ds[0]))

		// Last datagram first, twice (a retransmission), then the rest:
		// the same answer.
		var r Hello
		err = clienthello.ErrIncomplete
		order := slices.Clone(ds[:used])
		slices.Reverse(order)
		order = append([][]byte{order[0]}, order...)
		for _, d := range order {
			if info, err = r.Add(d); err != clienthello.ErrIncomplete {
				break
			}
		}
		if err != nil || info.ServerName != "media.example.com" {
			t.Errorf("version %v, reordered: %+v, %v", v, info, err)
		}
	}
}

// TestKeysOpen: an Initial protected under the keys of a client's first
// DCID opens under them whatever DCID it carries (the server's, once the
// client heard from it), and under no other connection's keys, no other
// version's, nor once a byte of it changed; a real client's first flight
// opens under its own.
func TestKeysOpen(t *testing.T) {
	first, moved, other := []byte("first-dcid"), []byte("srv1"), []byte("other-dcid")
	for _, v := range []uint32{Version1, Version2} {
		k, err := clientKeys(v, first)
		if err != nil {
			t.Fatal(err)
		}
		d := sealInitial(k, v, moved, []byte("cli"), 7, 100)
		mine, _ := NewKeys(v, first)
		theirs, _ := NewKeys(v, other)
		if !mine.Opens(d) || theirs.Opens(d) {
			t.Errorf("version %x: opens under its first DCID's keys %v (want true), another's %v (want false)", v, mine.Opens(d), theirs.Opens(d))
		}
		wrongVersion, _ := NewKeys(Version1^Version2^v, first)
		if wrongVersion.Opens(d) {
			t.Errorf("version %x: opens under the other version's keys", v)
		}
		for _, i := range []int{0, 9, len(d) - 1} {
			bad := slices.Clone(d)
			bad[i] ^= 0x40
			if mine.Opens(bad) {
				t.Errorf("version %x: opens with byte %d changed", v, i)
			}
		}
		if !bytes.Equal(d, sealInitial(k, v, moved, []byte("cli"), 7, 100)) {
			t.Errorf("version %x: Opens changed the datagram", v)
		}
	}
	if _, err := NewKeys(0xbabababa, first); err == nil {
		t.Error("keys of an unknown version")
	}
	ds := clientDatagrams(t, "a.example", quic.Version1, 300*time.Millisecond)
	p, _ := Peek(ds[0])
	k, _ := NewKeys(Version1, p.DCID)
	if !k.Opens(ds[0]) {
		t.Error("quic-go's first Initial does not open under its own keys")
	}
}

// sealInitial is a client Initial packet of version, to dcid from scid,
// numbered pn, with size bytes of payload (PING, then PADDING),
// protected under k (RFC 9001 §5.3, §5.4).
func sealInitial(k *keys, version uint32, dcid, scid []byte, pn byte, size int) []byte {
	typ := byte(0)
	if version == Version2 {
		typ = 1
	}
	hdr := []byte{0xc0 | typ<<4, byte(version >> 24), byte(version >> 16), byte(version >> 8), byte(version), byte(len(dcid))}
	hdr = append(hdr, dcid...)
	hdr = append(hdr, byte(len(scid)))
	hdr = append(hdr, scid...)
	length := 1 + size + 16 // a one-byte packet number, the payload, the tag
	hdr = append(hdr, 0, 0x40|byte(length>>8), byte(length))
	pnOff := len(hdr)
	hdr = append(hdr, pn)
	payload := make([]byte, size)
	payload[0] = 0x01 // PING
	nonce := slices.Clone(k.iv)
	nonce[len(nonce)-1] ^= pn
	d := k.aead.Seal(slices.Clone(hdr), nonce, payload, hdr)
	mask := make([]byte, 16)
	k.hp.Encrypt(mask, d[pnOff+4:pnOff+20])
	d[0] ^= mask[0] & 0x0f
	d[pnOff] ^= mask[1]
	return d
}

// TestLong: connection IDs from long headers of any type and version,
// and nothing from a short header or a truncated one.
func TestLong(t *testing.T) {
	hs := []byte{0xe0, 0, 0, 0, 1, 3, 'd', 'c', 'i', 2, 's', 'c', 0, 0} // Handshake, v1
	p, ok := Long(hs)
	if !ok || p.Version != 1 || string(p.DCID) != "dci" || string(p.SCID) != "sc" {
		t.Errorf("Handshake: %+v %v", p, ok)
	}
	vn := []byte{0x80, 0, 0, 0, 0, 0, 4, 's', 'c', 'i', 'd', 0, 0, 0, 1} // Version Negotiation, empty DCID
	if p, ok := Long(vn); !ok || p.Version != 0 || len(p.DCID) != 0 || string(p.SCID) != "scid" {
		t.Errorf("Version Negotiation: %+v %v", p, ok)
	}
	for _, bad := range [][]byte{{0x40, 1, 2, 3, 4, 5, 6, 7}, hs[:8], {0xc0, 0, 0, 0, 1, 200, 1, 2}} {
		if p, ok := Long(bad); ok {
			t.Errorf("Long(%x) = %+v", bad, p)
		}
	}
}

func TestRefused(t *testing.T) {
	ds := clientDatagrams(t, "a.example", quic.Version1, 300*time.Millisecond)
	if len(ds) == 0 {
		t.Fatal("no datagram")
	}
	d := slices.Clone(ds[0])
	d[len(d)-20] ^= 1 // inside the payload or its tag
	var h Hello
	if _, err := h.Add(d); err == nil || err == clienthello.ErrIncomplete {
		t.Errorf("a corrupted Initial: %v", err)
	}
	for _, bad := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n"),
		{0x40, 1, 2, 3, 4, 5, 6, 7}, // short header
		append([]byte{0xc0, 0xff, 0, 0, 0x1d}, bytes.Repeat([]byte{0}, 40)...), // a draft version
		append([]byte{0xe0, 0, 0, 0, 1}, bytes.Repeat([]byte{0}, 40)...),       // Handshake, not Initial
	} {
		var h Hello
		if _, ok := Peek(bad); ok {
			t.Errorf("Peek took %x", bad[:8])
		}
		if _, err := h.Add(bad); err != ErrNotInitial {
			t.Errorf("Add(%x): %v, want ErrNotInitial", bad[:8], err)
		}
	}
}

// FuzzAdd: any two datagrams get an answer without a panic, and a
// complete ClientHello names a valid host. Seeds in testdata/fuzz: the
// two datagrams of quic-go's ClientHello, QUIC v1 and v2.
func FuzzAdd(f *testing.F) {
	f.Add([]byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x41, 0}, []byte{})
	f.Fuzz(func(t *testing.T, d1, d2 []byte) {
		var h Hello
		Peek(d1)
		if p, ok := Long(d1); ok && (len(p.DCID) > 255 || len(p.SCID) > 255) {
			t.Fatalf("Long: %+v", p)
		}
		if _, err := h.Add(d1); err != clienthello.ErrIncomplete {
			return
		}
		info, err := h.Add(d2)
		if err == nil && info.ServerName != "" && strings.ToLower(info.ServerName) != info.ServerName {
			t.Fatalf("server name %q", info.ServerName)
		}
	})
}

// FuzzKeysOpens: any datagram gets an answer from Opens without a panic,
// is never changed by it, and one that opens still opens with nothing
// but its last byte changed only if the AEAD let a forgery through (it
// must not).
func FuzzKeysOpens(f *testing.F) {
	k, _ := clientKeys(Version1, []byte("first-dcid"))
	f.Add(sealInitial(k, Version1, []byte("srv1"), []byte("cli"), 7, 100), []byte("first-dcid"))
	f.Add([]byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x41, 0}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, d, dcid []byte) {
		keys, err := NewKeys(Version1, dcid)
		if err != nil {
			return
		}
		before := slices.Clone(d)
		opens := keys.Opens(d)
		if !bytes.Equal(d, before) {
			t.Fatalf("Opens changed the datagram")
		}
		if opens && len(d) > 0 {
			bad := slices.Clone(d)
			bad[len(bad)-1] ^= 1
			if h, err := parseHeader(d); err == nil && h.end == len(d) && keys.Opens(bad) {
				t.Fatalf("opens with its tag changed")
			}
		}
	})
}
