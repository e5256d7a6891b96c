package ktls

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// MaxPlaintext is the largest record payload (RFC 8446 §5.1: 2^14).
const MaxPlaintext = 16384

// recordLimit bounds records per key. RFC 8446 §5.5 allows 2^24.5 full
// records for AES-GCM; ChaCha20-Poly1305 allows more. One bound for all,
// well inside both.
const recordLimit = 1 << 24

// ErrBadRecord is a record that cannot be authentic: a wrong header, a
// length out of range, or a failed tag. The connection must send
// bad_record_mac (or decode_error) and close.
var ErrBadRecord = errors.New("ktls: bad record")

// Record is one decrypted TLS 1.3 record.
type Record struct {
	Type byte   // inner content type
	Data []byte // plaintext, without the content type and padding
	Wire int    // bytes the record took on the wire
}

// Opener decrypts TLS 1.3 records protected with one key.
type Opener struct {
	aead  cipher.AEAD
	iv    [12]byte
	nonce [12]byte // scratch: a local array would escape through the interface call
	seq   uint64
	buf   []byte
}

// NewOpener returns an opener whose next record has sequence number seq.
func NewOpener(k Keys, seq uint64) (*Opener, error) {
	a, err := newAEAD(k)
	if err != nil {
		return nil, err
	}
	return &Opener{aead: a, iv: k.IV, seq: seq}, nil
}

// Seq returns the sequence number of the next record.
func (o *Opener) Seq() uint64 { return o.seq }

// Open decrypts the record at the start of b. It returns (nil, nil) when b
// does not yet hold a whole record. Data aliases an internal buffer valid
// until the next Open.
func (o *Opener) Open(b []byte) (*Record, error) {
	if len(b) < 5 {
		return nil, nil
	}
	// RFC 8446 §5.2: TLSCiphertext is opaque_type 23, legacy version
	// 0x0303, and at most 2^14 + 256 bytes of encrypted record.
	if b[0] != RecordApplicationData || b[1] != 3 || b[2] != 3 {
		return nil, fmt.Errorf("%w: header % x", ErrBadRecord, b[:3])
	}
	n := int(binary.BigEndian.Uint16(b[3:5]))
	if n > MaxPlaintext+256 || n < o.aead.Overhead()+1 {
		return nil, fmt.Errorf("%w: length %d", ErrBadRecord, n)
	}
	if len(b) < 5+n {
		return nil, nil
	}
	if o.seq >= recordLimit {
		return nil, ErrRecordLimit
	}
	o.nonce = nonceFor(o.iv, o.seq)
	pt, err := o.aead.Open(o.buf[:0], o.nonce[:], b[5:5+n], b[:5])
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed at sequence %d", ErrBadRecord, o.seq)
	}
	o.buf = pt
	o.seq++
	// Strip zero padding; the last non-zero byte is the content type.
	i := len(pt) - 1
	for i >= 0 && pt[i] == 0 {
		i--
	}
	if i < 0 {
		return nil, fmt.Errorf("%w: no content type", ErrBadRecord)
	}
	if i > MaxPlaintext {
		return nil, fmt.Errorf("%w: plaintext of %d bytes", ErrBadRecord, i)
	}
	return &Record{Type: pt[i], Data: pt[:i], Wire: 5 + n}, nil
}

// OpenInPlace is Open decrypting within b itself: Data aliases b, which
// the caller consumes anyway. No buffer of the opener's is used.
func (o *Opener) OpenInPlace(b []byte) (*Record, error) {
	saved := o.buf
	o.buf = nil
	if len(b) >= 5 {
		o.buf = b[5:5]
	}
	rec, err := o.Open(b)
	o.buf = saved
	return rec, err
}

// Sealer encrypts TLS 1.3 records with one key.
type Sealer struct {
	aead  cipher.AEAD
	iv    [12]byte
	nonce [12]byte // scratch, as in Opener
	seq   uint64
}

// NewSealer returns a sealer whose next record has sequence number seq.
func NewSealer(k Keys, seq uint64) (*Sealer, error) {
	a, err := newAEAD(k)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: a, iv: k.IV, seq: seq}, nil
}

// Seq returns the sequence number of the next record.
func (s *Sealer) Seq() uint64 { return s.seq }

// Seal appends one record of content type typ carrying data (at most
// MaxPlaintext bytes) to dst.
func (s *Sealer) Seal(dst []byte, typ byte, data []byte) ([]byte, error) {
	if len(data) > MaxPlaintext {
		return dst, fmt.Errorf("ktls: %d bytes do not fit one record", len(data))
	}
	if s.seq >= recordLimit {
		return dst, ErrRecordLimit
	}
	n := len(data) + 1 + s.aead.Overhead()
	dst = slices.Grow(dst, 5+n) // seal in place, without a second buffer
	hdr := len(dst)
	dst = append(dst, RecordApplicationData, 3, 3, byte(n>>8), byte(n))
	dst = append(dst, data...)
	dst = append(dst, typ)
	s.nonce = nonceFor(s.iv, s.seq)
	body := dst[hdr+5:]
	sealed := s.aead.Seal(body[:0], s.nonce[:], body, dst[hdr:hdr+5])
	s.seq++
	return dst[:hdr+5+len(sealed)], nil
}

// SealAt seals one record in place: dst[start+5:start+5+n] already holds
// the plaintext (the 5 bytes before it are for the header). It returns dst
// ending after the sealed record; dst needs capacity for the content type
// and the tag (Overhead bytes), or it is grown.
func (s *Sealer) SealAt(dst []byte, start, n int, typ byte) ([]byte, error) {
	if n > MaxPlaintext {
		return dst, fmt.Errorf("ktls: %d bytes do not fit one record", n)
	}
	if s.seq >= recordLimit {
		return dst, ErrRecordLimit
	}
	size := n + 1 + s.aead.Overhead()
	dst = slices.Grow(dst[:start+5+n], 1+s.aead.Overhead())
	dst = append(dst, typ)
	dst[start], dst[start+1], dst[start+2] = RecordApplicationData, 3, 3
	dst[start+3], dst[start+4] = byte(size>>8), byte(size)
	s.nonce = nonceFor(s.iv, s.seq)
	body := dst[start+5:]
	sealed := s.aead.Seal(body[:0], s.nonce[:], body, dst[start:start+5])
	s.seq++
	return dst[:start+5+len(sealed)], nil
}

// Overhead is what sealing adds to a record's plaintext: the header, the
// content type and the tag.
func (s *Sealer) Overhead() int { return 5 + 1 + s.aead.Overhead() }

// nonceFor is the per-record nonce: the IV XOR the sequence number,
// left-padded to 12 bytes (RFC 8446 §5.3).
func nonceFor(iv [12]byte, seq uint64) [12]byte {
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	for i := range seqb {
		iv[4+i] ^= seqb[i]
	}
	return iv
}
