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

// ErrRecordOverflow is an authentic record whose plaintext is longer than
// 2^14 bytes: record_overflow (RFC 8446 §5.4). It also matches
// ErrBadRecord.
var ErrRecordOverflow = errors.New("ktls: record overflow")

// ErrUnexpectedRecord is a record that is not protected application data
// where only that may come (a TLS 1.3 record whose outer type is not
// application_data after the handshake), or a TLS 1.3 plaintext with no
// content type: unexpected_message (RFC 8446 §5, §5.4). It also matches
// ErrBadRecord.
var ErrUnexpectedRecord = errors.New("ktls: unexpected record")

// Record is one decrypted record.
type Record struct {
	Type byte   // content type (TLS 1.3: the inner one)
	Data []byte // plaintext, without the content type and padding
	Wire int    // bytes the record took on the wire
}

// Opener decrypts records protected with one key. TLS 1.3 records carry
// their content type inside; TLS 1.2 AEAD records (the suites the engine
// allows for 1.2) put it in the header and authenticate it with the
// sequence number as additional data, with an explicit nonce for AES-GCM
// (RFC 5288) and none for ChaCha20-Poly1305 (RFC 7905).
type Opener struct {
	aead     cipher.AEAD
	iv       [12]byte
	nonce    [12]byte // scratch: a local array would escape through the interface call
	aad      [13]byte // scratch, TLS 1.2
	seq      uint64
	buf      []byte
	v12      bool
	explicit bool
}

// NewOpener returns an opener whose next record has sequence number seq.
func NewOpener(k Keys, seq uint64) (*Opener, error) {
	a, err := newAEAD(k)
	if err != nil {
		return nil, err
	}
	return &Opener{aead: a, iv: k.IV, seq: seq, v12: k.Suite.tls12(), explicit: k.Suite.explicitNonce()}, nil
}

// Seq returns the sequence number of the next record.
func (o *Opener) Seq() uint64 { return o.seq }

// Open decrypts the record at the start of b. It returns (nil, nil) when b
// does not yet hold a whole record. Data aliases an internal buffer valid
// until the next Open.
func (o *Opener) Open(b []byte) (*Record, error) { return o.open(b, false) }

// OpenInPlace is Open decrypting within b itself: Data aliases b, which
// the caller consumes anyway. No buffer of the opener's is used.
func (o *Opener) OpenInPlace(b []byte) (*Record, error) { return o.open(b, true) }

func (o *Opener) open(b []byte, inPlace bool) (*Record, error) {
	if len(b) < 5 {
		return nil, nil
	}
	// RFC 8446 §5.2: TLSCiphertext is opaque_type 23, legacy version
	// 0x0303, and at most 2^14 + 256 bytes of encrypted record. TLS 1.2
	// (RFC 5246 §6.2.3) allows 2^14 + 2048 and any content type.
	typ := b[0]
	if b[1] != 3 || b[2] != 3 {
		return nil, fmt.Errorf("%w: header % x", ErrBadRecord, b[:3])
	}
	if (!o.v12 && typ != RecordApplicationData) ||
		(o.v12 && typ != RecordApplicationData && typ != RecordAlert && typ != RecordHandshake) {
		return nil, fmt.Errorf("%w: %w: outer type %d", ErrBadRecord, ErrUnexpectedRecord, typ)
	}
	n := int(binary.BigEndian.Uint16(b[3:5]))
	minLen, maxLen := o.aead.Overhead()+1, MaxPlaintext+256
	if o.v12 {
		minLen, maxLen = o.aead.Overhead(), MaxPlaintext+2048
		if o.explicit {
			minLen += 8
		}
	}
	if n > maxLen || n < minLen {
		return nil, fmt.Errorf("%w: length %d", ErrBadRecord, n)
	}
	if len(b) < 5+n {
		return nil, nil
	}
	if o.seq >= recordLimit {
		return nil, ErrRecordLimit
	}
	ct, aad := b[5:5+n], b[:5]
	if o.v12 {
		if o.explicit {
			copy(o.nonce[:4], o.iv[:4])
			copy(o.nonce[4:], ct[:8])
			ct = ct[8:]
		} else {
			o.nonce = nonceFor(o.iv, o.seq)
		}
		binary.BigEndian.PutUint64(o.aad[:8], o.seq)
		o.aad[8], o.aad[9], o.aad[10] = typ, 3, 3
		binary.BigEndian.PutUint16(o.aad[11:], uint16(len(ct)-o.aead.Overhead()))
		aad = o.aad[:]
	} else {
		o.nonce = nonceFor(o.iv, o.seq)
	}
	dst := o.buf[:0]
	if inPlace {
		dst = ct[:0]
	}
	pt, err := o.aead.Open(dst, o.nonce[:], ct, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed at sequence %d", ErrBadRecord, o.seq)
	}
	if !inPlace {
		o.buf = pt
	}
	o.seq++
	if o.v12 {
		if len(pt) > MaxPlaintext {
			return nil, fmt.Errorf("%w: %w: plaintext of %d bytes", ErrBadRecord, ErrRecordOverflow, len(pt))
		}
		return &Record{Type: typ, Data: pt, Wire: 5 + n}, nil
	}
	// Strip zero padding; the last non-zero byte is the content type.
	i := len(pt) - 1
	for i >= 0 && pt[i] == 0 {
		i--
	}
	if i < 0 {
		return nil, fmt.Errorf("%w: %w: no content type", ErrBadRecord, ErrUnexpectedRecord)
	}
	if i > MaxPlaintext {
		return nil, fmt.Errorf("%w: %w: plaintext of %d bytes", ErrBadRecord, ErrRecordOverflow, i)
	}
	return &Record{Type: pt[i], Data: pt[:i], Wire: 5 + n}, nil
}

// Sealer encrypts records with one key (TLS 1.3, or TLS 1.2 as Opener
// describes).
type Sealer struct {
	aead     cipher.AEAD
	iv       [12]byte
	nonce    [12]byte // scratch, as in Opener
	aad      [13]byte
	seq      uint64
	v12      bool
	explicit bool
}

// NewSealer returns a sealer whose next record has sequence number seq.
func NewSealer(k Keys, seq uint64) (*Sealer, error) {
	a, err := newAEAD(k)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: a, iv: k.IV, seq: seq, v12: k.Suite.tls12(), explicit: k.Suite.explicitNonce()}, nil
}

// Seq returns the sequence number of the next record.
func (s *Sealer) Seq() uint64 { return s.seq }

// Prefix is where a record's plaintext starts: after the header, and in
// TLS 1.2 AES-GCM after the explicit nonce.
func (s *Sealer) Prefix() int {
	if s.explicit {
		return 5 + 8
	}
	return 5
}

// Overhead is what sealing adds to a record's plaintext: the prefix, the
// TLS 1.3 content type, and the tag.
func (s *Sealer) Overhead() int {
	if s.v12 {
		return s.Prefix() + s.aead.Overhead()
	}
	return 5 + 1 + s.aead.Overhead()
}

// Seal appends one record of content type typ carrying data (at most
// MaxPlaintext bytes) to dst.
func (s *Sealer) Seal(dst []byte, typ byte, data []byte) ([]byte, error) {
	if len(data) > MaxPlaintext {
		return dst, fmt.Errorf("ktls: %d bytes do not fit one record", len(data))
	}
	dst = slices.Grow(dst, len(data)+s.Overhead()) // seal in place, without a second buffer
	start := len(dst)
	dst = dst[:start+s.Prefix()]
	dst = append(dst, data...)
	return s.SealAt(dst, start, len(data), typ)
}

// SealAt seals one record in place: dst[start+Prefix():][:n] already holds
// the plaintext (the bytes before it are for the header). It returns dst
// ending after the sealed record; dst needs capacity for the rest of the
// overhead, or it is grown.
func (s *Sealer) SealAt(dst []byte, start, n int, typ byte) ([]byte, error) {
	if n > MaxPlaintext {
		return dst, fmt.Errorf("ktls: %d bytes do not fit one record", n)
	}
	if s.seq >= recordLimit {
		return dst, ErrRecordLimit
	}
	p := s.Prefix()
	dst = slices.Grow(dst[:start+p+n], s.Overhead()-p)
	hdrType, size := byte(RecordApplicationData), n+1+s.aead.Overhead()
	var aad []byte
	if s.v12 {
		hdrType, size = typ, p-5+n+s.aead.Overhead()
		if s.explicit {
			// The explicit nonce is the sequence number: unique per key.
			copy(s.nonce[:4], s.iv[:4])
			binary.BigEndian.PutUint64(s.nonce[4:], s.seq)
			copy(dst[start+5:start+13], s.nonce[4:])
		} else {
			s.nonce = nonceFor(s.iv, s.seq)
		}
		binary.BigEndian.PutUint64(s.aad[:8], s.seq)
		s.aad[8], s.aad[9], s.aad[10] = typ, 3, 3
		binary.BigEndian.PutUint16(s.aad[11:], uint16(n))
		aad = s.aad[:]
	} else {
		dst = append(dst, typ)
		s.nonce = nonceFor(s.iv, s.seq)
	}
	dst[start], dst[start+1], dst[start+2] = hdrType, 3, 3
	dst[start+3], dst[start+4] = byte(size>>8), byte(size)
	if aad == nil {
		aad = dst[start : start+5]
	}
	body := dst[start+p:]
	sealed := s.aead.Seal(body[:0], s.nonce[:], body, aad)
	s.seq++
	return dst[:start+p+len(sealed)], nil
}

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
