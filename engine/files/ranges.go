package files

import (
	"bytes"
	"strconv"
)

// Range is a byte range of a representation: Len bytes from Off.
type Range struct{ Off, Len int64 }

// maxRanges bounds the ranges one request may ask for. RFC 9110 §14.2: a
// server "MAY ignore or reject a Range header field that contains ... a set
// of many small ranges", an indication of a broken client or an attack.
const maxRanges = 64

// rangeResult is how ParseRange judged a Range header.
type rangeResult uint8

const (
	rangeIgnore        rangeResult = iota // serve the whole representation (200)
	rangeOK                               // serve the ranges (206)
	rangeUnsatisfiable                    // 416
)

// ParseRange parses a Range header value against a representation of the
// given size, appending satisfiable ranges to dst. Syntax errors, other
// units, too many ranges, and ranges that add up to more than the
// representation (as nginx judges them) are ignored: the whole
// representation is served, as RFC 9110 §14.2 allows. The ranges that
// remain are sorted, and overlapping or adjacent ones are coalesced
// (§14.2: "a server MAY coalesce any of the ranges that overlap"), so a
// multipart body never repeats a byte and is never larger than the
// representation plus its part headers.
func ParseRange(v []byte, size int64, dst []Range) ([]Range, rangeResult) {
	dst = dst[:0]
	const prefix = "bytes="
	if len(v) < len(prefix) || !bytes.EqualFold(v[:len(prefix)], []byte(prefix)) {
		return dst, rangeIgnore
	}
	if size == 0 {
		// Nothing can be satisfied in an empty representation; serving it
		// whole (zero bytes, 200) is the useful answer.
		return dst, rangeIgnore
	}
	specs := v[len(prefix):]
	count := 0
	var total int64
	for len(specs) > 0 {
		var spec []byte
		if i := bytes.IndexByte(specs, ','); i >= 0 {
			spec, specs = specs[:i], specs[i+1:]
		} else {
			spec, specs = specs, nil
		}
		spec = trimOWS(spec)
		if len(spec) == 0 {
			continue // RFC 9110 §5.6.1: empty list elements are ignored
		}
		if count++; count > maxRanges {
			return dst[:0], rangeIgnore
		}
		dash := bytes.IndexByte(spec, '-')
		if dash < 0 {
			return dst[:0], rangeIgnore
		}
		first, last := spec[:dash], spec[dash+1:]
		var r Range
		switch {
		case len(first) == 0: // suffix: "-N", the last N bytes
			n, ok := parseDigits(last)
			if !ok {
				return dst[:0], rangeIgnore
			}
			if n == 0 {
				continue // unsatisfiable
			}
			r = Range{Off: max(size-n, 0), Len: min(n, size)}
		default:
			a, ok := parseDigits(first)
			if !ok {
				return dst[:0], rangeIgnore
			}
			b := size - 1
			if len(last) > 0 {
				if b, ok = parseDigits(last); !ok || b < a {
					return dst[:0], rangeIgnore
				}
			}
			if a >= size {
				continue // unsatisfiable
			}
			r = Range{Off: a, Len: min(b, size-1) - a + 1}
		}
		total += r.Len
		if total > size {
			return dst[:0], rangeIgnore
		}
		dst = append(dst, r)
	}
	if count == 0 {
		return dst, rangeIgnore
	}
	if len(dst) == 0 {
		return dst, rangeUnsatisfiable
	}
	return coalesce(dst), rangeOK
}

// coalesce sorts ranges by offset and merges those that overlap or touch.
func coalesce(rs []Range) []Range {
	if len(rs) < 2 {
		return rs
	}
	// Insertion sort: at most maxRanges, and no allocation.
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Off < rs[j-1].Off; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if end := last.Off + last.Len; r.Off <= end {
			last.Len = max(end, r.Off+r.Len) - last.Off
			continue
		}
		out = append(out, r)
	}
	return out
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func parseDigits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// AppendContentRange appends "bytes first-last/size".
func AppendContentRange(dst []byte, r Range, size int64) []byte {
	dst = append(dst, "bytes "...)
	dst = strconv.AppendInt(dst, r.Off, 10)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, r.Off+r.Len-1, 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, size, 10)
}

// OneRange is ParseRange for a reader that answers one range or none: r
// is the range when v asks for exactly one satisfiable range (after
// coalescing), unsat is true when v asks for none that is satisfiable
// (416), and ok is false for every other case (the whole representation
// is served).
func OneRange(v []byte, size int64) (r Range, ok, unsat bool) {
	var buf [1]Range
	rs, res := ParseRange(v, size, buf[:0])
	switch {
	case res == rangeUnsatisfiable:
		return Range{}, false, true
	case res == rangeOK && len(rs) == 1:
		return rs[0], true, false
	}
	return Range{}, false, false
}
