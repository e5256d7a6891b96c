// Package quicinitial reads the ClientHello a QUIC client sends in its
// Initial packets, far enough to route the connection by its server name
// without terminating QUIC: the version's Initial keys (RFC 9001 §5.2,
// RFC 9369 §3.3), header protection removed (RFC 9001 §5.4), the payload
// opened, and the CRYPTO frames put back in order (RFC 9000 §19.6). The
// hello may span several Initial packets and datagrams: a Hello gathers
// them. It only reads: it never answers a client, derives no server keys
// and knows nothing of Retry or Version Negotiation. Invariant: a Hello
// holds at most clienthello.MaxBytes of CRYPTO data in order and as much
// again ahead of a gap, whatever a client sends.
package quicinitial

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mediaship/engine/clienthello"
)

// Versions whose Initial packets this package opens.
const (
	Version1 uint32 = 0x00000001
	Version2 uint32 = 0x6b3343cf
)

var (
	salt1 = []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}
	salt2 = []byte{0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9}
)

// ErrNotInitial: the datagram does not start with a client Initial
// packet of a version this package knows.
var ErrNotInitial = errors.New("quicinitial: not a QUIC Initial packet")

// Packet is what the first packet of a datagram says about the
// connection, read before any decryption.
type Packet struct {
	Version uint32
	DCID    []byte // the client's Destination Connection ID (aliases the datagram)
	SCID    []byte
}

// Peek reads the long header of a datagram's first packet: ok is false
// unless it is an Initial of a known version.
func Peek(d []byte) (Packet, bool) {
	h, err := parseHeader(d)
	if err != nil {
		return Packet{}, false
	}
	return Packet{Version: h.version, DCID: h.dcid, SCID: h.scid}, true
}

// Long reads the version and connection IDs of any long-header packet
// at the start of a datagram, of any version, by the invariants all QUIC
// versions share (RFC 8999 §5.1): ok is false for a short header or a
// truncated one.
func Long(d []byte) (Packet, bool) {
	if len(d) < 7 || d[0]&0x80 == 0 {
		return Packet{}, false
	}
	p := Packet{Version: binary.BigEndian.Uint32(d[1:5])}
	i := 5
	n := int(d[i])
	i++
	if i+n >= len(d) {
		return Packet{}, false
	}
	p.DCID = d[i : i+n]
	i += n
	n = int(d[i])
	i++
	if i+n > len(d) {
		return Packet{}, false
	}
	p.SCID = d[i : i+n]
	return p, true
}

type header struct {
	version    uint32
	dcid, scid []byte
	pnOffset   int // where the packet number starts
	end        int // where the packet ends (its Length)
}

func parseHeader(d []byte) (header, error) {
	var h header
	if len(d) < 7 || d[0]&0xc0 != 0xc0 {
		return h, ErrNotInitial
	}
	h.version = binary.BigEndian.Uint32(d[1:5])
	typ := (d[0] >> 4) & 3
	switch {
	case h.version == Version1 && typ == 0, h.version == Version2 && typ == 1:
	default:
		return h, ErrNotInitial
	}
	p := 5
	n := int(d[p])
	p++
	if n > 20 || p+n > len(d) {
		return h, ErrNotInitial
	}
	h.dcid = d[p : p+n]
	p += n
	if p >= len(d) {
		return h, ErrNotInitial
	}
	n = int(d[p])
	p++
	if n > 20 || p+n > len(d) {
		return h, ErrNotInitial
	}
	h.scid = d[p : p+n]
	p += n
	tokLen, k := varint(d[p:])
	if k == 0 || uint64(len(d)-p-k) < tokLen {
		return h, ErrNotInitial
	}
	p += k + int(tokLen)
	length, k := varint(d[p:])
	if k == 0 || uint64(len(d)-p-k) < length || length < 20 {
		return h, ErrNotInitial
	}
	h.pnOffset = p + k
	h.end = h.pnOffset + int(length)
	return h, nil
}

// varint reads a QUIC variable-length integer (RFC 9000 §16); k is 0
// when b is too short.
func varint(b []byte) (v uint64, k int) {
	if len(b) == 0 {
		return 0, 0
	}
	k = 1 << (b[0] >> 6)
	if len(b) < k {
		return 0, 0
	}
	v = uint64(b[0] & 0x3f)
	for i := 1; i < k; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, k
}

// keys are one direction's Initial packet protection.
type keys struct {
	aead cipher.AEAD
	iv   []byte
	hp   cipher.Block
}

// clientKeys derives the client's Initial keys for dcid.
func clientKeys(version uint32, dcid []byte) (*keys, error) {
	salt, prefix := salt1, "quic "
	if version == Version2 {
		salt, prefix = salt2, "quicv2 "
	}
	initial, err := hkdf.Extract(sha256.New, dcid, salt)
	if err != nil {
		return nil, err
	}
	secret := expandLabel(initial, "client in", 32)
	block, err := aes.NewCipher(expandLabel(secret, prefix+"key", 16))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	hp, err := aes.NewCipher(expandLabel(secret, prefix+"hp", 16))
	if err != nil {
		return nil, err
	}
	return &keys{aead: aead, iv: expandLabel(secret, prefix+"iv", 12), hp: hp}, nil
}

// expandLabel is TLS 1.3's HKDF-Expand-Label with an empty context
// (RFC 8446 §7.1).
func expandLabel(secret []byte, label string, n int) []byte {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = append(info, byte(n>>8), byte(n), byte(len(full)))
	info = append(info, full...)
	info = append(info, 0)
	out, err := hkdf.Expand(sha256.New, secret, string(info), n)
	if err != nil {
		panic(err) // n is far below HKDF's limit
	}
	return out
}

// open removes header protection from the packet at d[:h.end] (in a
// copy of its header) and decrypts its payload: the plaintext frames.
func (k *keys) open(d []byte, h header) ([]byte, error) {
	if h.end > len(d) || h.pnOffset+4+16 > h.end {
		return nil, errors.New("quicinitial: packet shorter than its header says")
	}
	mask := make([]byte, 16)
	k.hp.Encrypt(mask, d[h.pnOffset+4:h.pnOffset+4+16])
	first := d[0] ^ mask[0]&0x0f
	pnLen := int(first&3) + 1
	hdr := make([]byte, h.pnOffset+pnLen)
	copy(hdr, d[:h.pnOffset+pnLen])
	hdr[0] = first
	var pn uint64
	for i := 0; i < pnLen; i++ {
		hdr[h.pnOffset+i] ^= mask[1+i]
		pn = pn<<8 | uint64(hdr[h.pnOffset+i])
	}
	nonce := make([]byte, len(k.iv))
	copy(nonce, k.iv)
	for i := 0; i < 8; i++ {
		nonce[len(nonce)-1-i] ^= byte(pn >> (8 * i))
	}
	plain, err := k.aead.Open(nil, nonce, d[h.pnOffset+pnLen:h.end], hdr)
	if err != nil {
		return nil, fmt.Errorf("quicinitial: Initial packet does not open: %w", err)
	}
	return plain, nil
}

// Keys are the client Initial packet protection of one connection: its
// version's keys, derived from the Destination Connection ID of its
// client's first Initial. They stay the same when the client moves to
// the server's connection ID (RFC 9001 §5.2), so an Initial that opens
// under them, whatever Destination Connection ID it carries, was made by
// that client, or by one that saw its first flight.
type Keys struct {
	version uint32
	k       *keys
}

// NewKeys derives the client Initial keys of version for the connection
// whose client sent its first Initial to dcid.
func NewKeys(version uint32, dcid []byte) (*Keys, error) {
	if version != Version1 && version != Version2 {
		return nil, ErrNotInitial
	}
	k, err := clientKeys(version, dcid)
	if err != nil {
		return nil, err
	}
	return &Keys{version: version, k: k}, nil
}

// Opens reports whether d begins with an Initial packet of the keys'
// version that opens under them: header protection removed, payload
// authenticated. It reads d and never changes it.
func (k *Keys) Opens(d []byte) bool {
	h, err := parseHeader(d)
	if err != nil || h.version != k.version || h.end > len(d) {
		return false
	}
	_, err = k.k.open(d, h)
	return err == nil
}

// Hello gathers one client's ClientHello from its Initial packets: the
// CRYPTO data by offset, up to clienthello.MaxBytes. Not safe for
// concurrent use.
type Hello struct {
	version uint32
	dcid    []byte // the first Initial's, which fixes the keys
	keys    *keys
	crypto  []byte // CRYPTO bytes from offset 0, as far as contiguous
	pending map[uint64][]byte
	held    int // bytes in pending
}

// Add reads the Initial packets of one datagram from the client. It
// returns the ClientHello's routing information once all of it has
// arrived, clienthello.ErrIncomplete while more is needed, or why the
// datagram cannot be a client's Initial.
func (c *Hello) Add(d []byte) (clienthello.Info, error) {
	for len(d) > 0 {
		h, err := parseHeader(d)
		if err != nil {
			break // coalesced packets after the Initials (0-RTT), or padding
		}
		if c.keys == nil {
			if c.keys, err = clientKeys(h.version, h.dcid); err != nil {
				return clienthello.Info{}, err
			}
			c.version, c.dcid = h.version, append([]byte(nil), h.dcid...)
		} else if h.version != c.version || string(h.dcid) != string(c.dcid) {
			// A client keeps its first Destination Connection ID until it
			// hears from the server, which it has not.
			return clienthello.Info{}, errors.New("quicinitial: Initial with another connection ID or version")
		}
		if h.end > len(d) {
			return clienthello.Info{}, errors.New("quicinitial: packet longer than its datagram")
		}
		frames, err := c.keys.open(d, h)
		if err != nil {
			return clienthello.Info{}, err
		}
		if err := c.frames(frames); err != nil {
			return clienthello.Info{}, err
		}
		d = d[h.end:]
	}
	if len(c.crypto) == 0 && c.keys == nil {
		return clienthello.Info{}, ErrNotInitial
	}
	return clienthello.FromHandshake(c.crypto)
}

// CarriesHello reports whether a datagram carries part of a client's
// ClientHello: CRYPTO data in its Initial packets, at any offset, as a
// client's first flight does (in order or not), and its later Initials
// (acknowledgements of the server's) do not.
func CarriesHello(d []byte) bool {
	var h Hello
	h.Add(d)
	return len(h.crypto) > 0 || len(h.pending) > 0
}

// frames takes the CRYPTO frames of an Initial payload (RFC 9000 §17.2.2:
// it may hold PADDING, PING, ACK, CRYPTO and CONNECTION_CLOSE only).
func (c *Hello) frames(p []byte) error {
	for len(p) > 0 {
		typ, k := varint(p)
		if k == 0 {
			return errMalformed
		}
		p = p[k:]
		switch typ {
		case 0x00, 0x01: // PADDING, PING
		case 0x02, 0x03: // ACK: a client has nothing to acknowledge yet, but may send one
			n, err := skipACK(p, typ == 0x03)
			if err != nil {
				return err
			}
			p = p[n:]
		case 0x06: // CRYPTO
			off, k1 := varint(p)
			if k1 == 0 {
				return errMalformed
			}
			n, k2 := varint(p[k1:])
			if k2 == 0 || uint64(len(p)-k1-k2) < n {
				return errMalformed
			}
			data := p[k1+k2 : k1+k2+int(n)]
			p = p[k1+k2+int(n):]
			if err := c.crypto_(off, data); err != nil {
				return err
			}
		case 0x1c: // CONNECTION_CLOSE
			return errors.New("quicinitial: the client closed the connection")
		default:
			return fmt.Errorf("quicinitial: frame type %#x in an Initial packet", typ)
		}
	}
	return nil
}

var errMalformed = errors.New("quicinitial: malformed frame")

func skipACK(p []byte, ecn bool) (int, error) {
	n := 0
	fields := 4 // largest, delay, range count, first range
	var ranges uint64
	for i := 0; i < fields; i++ {
		v, k := varint(p[n:])
		if k == 0 {
			return 0, errMalformed
		}
		if i == 2 {
			ranges = v
		}
		n += k
	}
	if ranges > 1000 {
		return 0, errMalformed
	}
	more := 2 * int(ranges)
	if ecn {
		more += 3
	}
	for i := 0; i < more; i++ {
		_, k := varint(p[n:])
		if k == 0 {
			return 0, errMalformed
		}
		n += k
	}
	return n, nil
}

// crypto_ places CRYPTO data at off, keeping what arrives ahead of a gap
// until the gap fills, within clienthello.MaxBytes in all.
func (c *Hello) crypto_(off uint64, data []byte) error {
	if off+uint64(len(data)) > clienthello.MaxBytes {
		return fmt.Errorf("quicinitial: CRYPTO data past %d bytes", clienthello.MaxBytes)
	}
	have := uint64(len(c.crypto))
	switch {
	case off+uint64(len(data)) <= have:
		return nil // a retransmission
	case off <= have:
		c.crypto = append(c.crypto, data[have-off:]...)
	default:
		if _, dup := c.pending[off]; !dup {
			if c.pending == nil {
				c.pending = map[uint64][]byte{}
			}
			if c.held+len(data) > clienthello.MaxBytes {
				return errors.New("quicinitial: too much CRYPTO data ahead of a gap")
			}
			c.pending[off] = append([]byte(nil), data...)
			c.held += len(data)
		}
		return nil
	}
	// The gap may have closed for data held back.
	for progress := true; progress; {
		progress = false
		for o, b := range c.pending {
			have := uint64(len(c.crypto))
			if o > have {
				continue
			}
			if end := o + uint64(len(b)); end > have {
				c.crypto = append(c.crypto, b[have-o:]...)
			}
			delete(c.pending, o)
			c.held -= len(b)
			progress = true
		}
	}
	return nil
}
