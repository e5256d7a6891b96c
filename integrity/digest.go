package integrity

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/internal/fileio"
)

// Digest is a 32-byte BLAKE3 hash.
type Digest [32]byte

// String is the hex form b3sum prints.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// ParseHex reads the 64-hex-digit form.
func ParseHex(s string) (Digest, error) {
	var d Digest
	if len(s) != 64 {
		return d, fmt.Errorf("integrity: digest %q is not 64 hex digits", s)
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, fmt.Errorf("integrity: digest %q is not hex", s)
	}
	return d, nil
}

// SHA256 is a file's SHA-256, for the ecosystems that publish it (Hugging
// Face LFS, GitHub releases, distributions). It has no tree: a file is
// checked against it whole.
type SHA256 [32]byte

// String is the hex form sha256sum prints.
func (s SHA256) String() string { return hex.EncodeToString(s[:]) }

// HeaderValue is the sha-256 member of a Repr-Digest field.
func (s SHA256) HeaderValue() string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(s[:]) + ":"
}

// ParseSHA256Hex reads the 64-hex-digit form.
func ParseSHA256Hex(v string) (SHA256, error) {
	d, err := ParseHex(v)
	return SHA256(d), err
}

// chunk is how much a hash reads at a time.
const chunk = 1 << 20

// Sum hashes everything r yields, a chunk at a time.
func Sum(r io.Reader) (Digest, int64, error) {
	h := blake3.New()
	buf := make([]byte, chunk)
	n, err := io.CopyBuffer(h, r, buf)
	var d Digest
	h.Sum(d[:0])
	return d, n, err
}

// SumRange hashes n bytes of f from off, and fails if fewer are there.
func SumRange(f io.ReaderAt, off, n int64) (Digest, error) {
	d, got, err := Sum(io.NewSectionReader(f, off, n))
	if err == nil && got != n {
		err = fmt.Errorf("%w: %d of %d bytes", ErrShort, got, n) // the sentinel names its package
	}
	return d, err
}

// ErrShort means a file ended before its expected size: it is
// fileio.ErrShrank, the one error every path gives for it.
var ErrShort = fileio.ErrShrank

// HeaderValue is the Repr-Digest (and Content-Digest) field value for d:
// "blake3=:<base64>:" (RFC 9530 §2 with RFC 8941 byte sequences).
func (d Digest) HeaderValue() string {
	return "blake3=:" + base64.StdEncoding.EncodeToString(d[:]) + ":"
}

// Errors of ParseHeaderValue.
var (
	ErrNoFieldDigest  = errors.New("integrity: no blake3 member in the digest field")
	ErrBadFieldDigest = errors.New("integrity: malformed digest field")
)

// ParseHeaderValue reads the blake3 member of a Repr-Digest or
// Content-Digest dictionary (RFC 9530: key=:base64:), the inverse of
// HeaderValue. Other algorithms are skipped; an empty field or one
// without blake3 is ErrNoFieldDigest, a blake3 member that is not 32
// bytes of base64 ErrBadFieldDigest.
func ParseHeaderValue(v string) (Digest, error) {
	d, err := headerMember(v, "blake3")
	return Digest(d), err
}

// ParseSHA256HeaderValue reads the sha-256 member of a Repr-Digest field,
// as ParseHeaderValue reads the blake3 one.
func ParseSHA256HeaderValue(v string) (SHA256, error) {
	d, err := headerMember(v, "sha-256")
	return SHA256(d), err
}

// headerMember reads the 32-byte member alg of a digest field.
func headerMember(v, alg string) ([32]byte, error) {
	var d [32]byte
	for _, member := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || strings.ToLower(strings.TrimSpace(k)) != alg {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			return d, fmt.Errorf("%w: %q", ErrBadFieldDigest, v)
		}
		b, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		if err != nil || len(b) != len(d) {
			return d, fmt.Errorf("%w: %q", ErrBadFieldDigest, v)
		}
		copy(d[:], b)
		return d, nil
	}
	return d, fmt.Errorf("%w: %q", ErrNoFieldDigest, v)
}

// ETag is the strong entity-tag derived from d: replicas of the same
// bytes agree on it.
func (d Digest) ETag() string {
	return `"b3-` + base64.RawURLEncoding.EncodeToString(d[:]) + `"`
}
