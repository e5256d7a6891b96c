package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// parseReprDigest returns the BLAKE3 digest of a Repr-Digest field value
// (RFC 9530: a dictionary of algorithm = :base64 byte sequence:), as the
// engine sends it: "blake3=:BASE64:", possibly among other algorithms.
// A blake3 member that is not a 32-byte byte sequence, a malformed
// member, or no blake3 member at all is an error.
func parseReprDigest(v string) ([32]byte, error) {
	var sum [32]byte
	found := false
	for member := range strings.SplitSeq(v, ",") {
		member = strings.Trim(member, " \t")
		key, val, ok := strings.Cut(member, "=")
		if !ok || key == "" {
			return sum, fmt.Errorf("Repr-Digest %q: member %q is not key=value", v, member)
		}
		if key != "blake3" {
			continue
		}
		if found {
			return sum, fmt.Errorf("Repr-Digest %q: blake3 twice", v)
		}
		// Parameters (";...") are not used by the engine; refuse them
		// rather than guess.
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			return sum, fmt.Errorf("Repr-Digest %q: blake3 value is not a :base64: byte sequence", v)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(val[1 : len(val)-1])
		if err != nil {
			return sum, fmt.Errorf("Repr-Digest %q: blake3 value: %v", v, err)
		}
		if len(raw) != len(sum) {
			return sum, fmt.Errorf("Repr-Digest %q: blake3 digest is %d bytes, want 32", v, len(raw))
		}
		copy(sum[:], raw)
		found = true
	}
	if !found {
		return sum, fmt.Errorf("Repr-Digest %q has no blake3 member", v)
	}
	return sum, nil
}

// parseSinkReply parses a sink stream's whole reply, "<bytes> <blake3
// hex>\n" (docs/WEBTRANSPORT.md, mode=sink), and nothing after it.
func parseSinkReply(b []byte) (n int64, sum [32]byte, err error) {
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || strings.Contains(line, "\n") {
		return 0, sum, fmt.Errorf("sink reply %s is not one line ending in \\n", quoteShort(b))
	}
	num, hx, ok := strings.Cut(line, " ")
	if !ok {
		return 0, sum, fmt.Errorf("sink reply %s: want \"<bytes> <hex>\"", quoteShort(b))
	}
	if n, err = parseDecimal(num); err != nil {
		return 0, sum, fmt.Errorf("sink reply %s: bytes: %v", quoteShort(b), err)
	}
	if len(hx) != 64 {
		return 0, sum, fmt.Errorf("sink reply %s: digest is not 64 hex digits", quoteShort(b))
	}
	if _, err := hex.Decode(sum[:], []byte(hx)); err != nil {
		return 0, sum, fmt.Errorf("sink reply %s: digest: %v", quoteShort(b), err)
	}
	return n, sum, nil
}

// parseDatagramsLine parses the line a datagrams session's server sends
// on its unidirectional stream after the last datagram, "<sent> <payload
// bytes each>\n", and nothing after it.
func parseDatagramsLine(b []byte) (sent, size int64, err error) {
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || strings.Contains(line, "\n") {
		return 0, 0, fmt.Errorf("datagrams line %s is not one line ending in \\n", quoteShort(b))
	}
	a, c, ok := strings.Cut(line, " ")
	if !ok {
		return 0, 0, fmt.Errorf("datagrams line %s: want \"<sent> <size>\"", quoteShort(b))
	}
	if sent, err = parseDecimal(a); err != nil {
		return 0, 0, fmt.Errorf("datagrams line %s: sent: %v", quoteShort(b), err)
	}
	if size, err = parseDecimal(c); err != nil {
		return 0, 0, fmt.Errorf("datagrams line %s: size: %v", quoteShort(b), err)
	}
	return sent, size, nil
}

// quoteShort quotes a reply for an error, cut to 80 bytes: a wrong reply
// can be a megabyte of anything.
func quoteShort(b []byte) string {
	if len(b) > 80 {
		return strconv.Quote(string(b[:80])) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

// parseDecimal accepts only plain decimal digits: no sign, no spaces.
func parseDecimal(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

// DatagramStats is the account of the datagrams of one session: those the
// server sent (mode=datagrams) or those it echoed (mode=echo).
type DatagramStats struct {
	Received   int64   `json:"received"`     // distinct sequence numbers with the right content
	Duplicates int64   `json:"duplicates"`   // a sequence number seen again
	Corrupt    int64   `json:"corrupt"`      // shorter than 8 bytes, or content not the pattern
	OutOfRange int64   `json:"out_of_range"` // sequence number ≥ the count asked for
	Lost       int64   `json:"lost"`         // count − received
	Sent       int64   `json:"sent"`         // the server's line (datagrams), or what the client sent (echo)
	Size       int64   `json:"size"`         // payload bytes each, from the same
	Bytes      int64   `json:"bytes"`        // payload bytes of the datagrams counted as received
	ElapsedS   float64 `json:"elapsed_s"`    // session open to the last datagram received
	MiBs       float64 `json:"mib_s"`        // bytes / elapsed_s / 2^20
}

// makeDatagram builds datagram seq of size bytes (size ≥ 8): seq as 8
// bytes big-endian, then byte i ≥ 8 is pattern byte seq × 65536 + i.
func makeDatagram(seq uint64, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, seq)
	if size > 8 {
		fillPattern(b[8:], seq*65536+8)
	}
	return b
}

// datagramTally counts datagrams against the count asked for; count < 0
// means unknown (no sequence number is out of range). It is not safe for
// concurrent use.
type datagramTally struct {
	count int64
	seen  map[uint64]bool
	stats DatagramStats
}

func newDatagramTally(count int64) *datagramTally {
	return &datagramTally{count: count, seen: make(map[uint64]bool)}
}

var (
	errDatagramShort   = errors.New("shorter than 8 bytes")
	errDatagramRange   = errors.New("sequence number out of range")
	errDatagramContent = errors.New("content is not the pattern")
	errDatagramDup     = errors.New("duplicate")
)

// add accounts for one datagram and says what was wrong with it, if
// anything.
func (t *datagramTally) add(b []byte) error {
	if len(b) < 8 {
		t.stats.Corrupt++
		return errDatagramShort
	}
	seq := binary.BigEndian.Uint64(b)
	if t.count >= 0 && seq >= uint64(t.count) {
		t.stats.OutOfRange++
		return errDatagramRange
	}
	if checkPattern(b[8:], seq*65536+8) >= 0 {
		t.stats.Corrupt++
		return errDatagramContent
	}
	if t.seen[seq] {
		t.stats.Duplicates++
		return errDatagramDup
	}
	t.seen[seq] = true
	t.stats.Received++
	t.stats.Bytes += int64(len(b))
	return nil
}

// finish fills in what is lost against want datagrams (the count asked
// for, or what the server says it sent when that is unknown).
func (t *datagramTally) finish(want int64) DatagramStats {
	s := t.stats
	s.Lost = max(want-s.Received, 0)
	return s
}
