// Package clienthello reads what routing needs from a TLS ClientHello,
// without terminating TLS: the server name (SNI) and the offered
// application protocols (ALPN). It reads the ClientHello as it starts a
// TLS connection over TCP (one or more handshake records, RFC 8446 §5.1)
// or as QUIC carries it in CRYPTO frames (the handshake message alone,
// RFC 9001 §4).
//
// It checks the structure it walks and nothing else: the hello is
// relayed to the origin, which judges the rest. It keeps no state and
// decrypts nothing (encrypted ClientHello's inner name stays unknown).
// Invariant: no more than MaxBytes is ever asked for, and ErrIncomplete
// means only "a valid beginning", so a caller that waits on it waits for
// bytes that can still make a ClientHello.
package clienthello

import (
	"errors"
	"fmt"
	"strings"
)

// Info is what a ClientHello says about where it is going.
type Info struct {
	// ServerName is the SNI host_name, lower-case and without a trailing
	// dot; "" when the hello has none.
	ServerName string
	// ALPN lists the offered application protocols in the client's order.
	ALPN []string
	// Random is the hello's random, fresh for every hello a client
	// sends (RFC 8446 §4.1.2): the same one twice is the same hello.
	Random [32]byte
}

// MaxBytes bounds a ClientHello: records and all. Post-quantum key shares
// make hellos of 1.5 KiB and more; 16 KiB leaves room for many
// extensions and is what one record may carry.
const MaxBytes = 16 << 10

// ErrIncomplete means the bytes so far are a valid beginning: read more.
var ErrIncomplete = errors.New("clienthello: incomplete")

// ErrNotTLS means the connection does not start with a TLS handshake
// record (plain HTTP on a TLS port, say).
var ErrNotTLS = errors.New("clienthello: not a TLS handshake")

const (
	recordHandshake = 22
	typeClientHello = 1
	extServerName   = 0
	extALPN         = 16
)

// FromRecords reads the ClientHello at the start of a TLS stream. It
// returns ErrIncomplete while more bytes are needed, the hello's size
// included (at most MaxBytes), and n, the bytes of stream the records of
// the hello take.
func FromRecords(stream []byte) (info Info, n int, err error) {
	var msg []byte // the handshake bytes gathered from the records
	need := -1     // the handshake message's length, once its header is in
	for {
		if need >= 0 && len(msg) >= need {
			if len(msg) > need {
				// The hello must be the only message in its records
				// (RFC 8446 §5.1: a key change may not follow in the
				// same record; nothing else may precede the server's).
				return Info{}, 0, errors.New("clienthello: bytes after the ClientHello in its record")
			}
			info, err := FromHandshake(msg)
			return info, n, err
		}
		if n+5 > len(stream) {
			if n == 0 && len(stream) > 0 && stream[0] != recordHandshake {
				return Info{}, 0, ErrNotTLS
			}
			return Info{}, 0, ErrIncomplete
		}
		h := stream[n : n+5]
		if h[0] != recordHandshake {
			if n == 0 {
				return Info{}, 0, ErrNotTLS
			}
			return Info{}, 0, fmt.Errorf("clienthello: record type %d inside the ClientHello", h[0])
		}
		if h[1] != 3 || h[2] > 4 {
			return Info{}, 0, fmt.Errorf("clienthello: record version %d.%d", h[1], h[2])
		}
		size := int(h[3])<<8 | int(h[4])
		if size == 0 || size > 1<<14 {
			return Info{}, 0, fmt.Errorf("clienthello: handshake record of %d bytes", size)
		}
		if n+5+size > MaxBytes {
			return Info{}, 0, fmt.Errorf("clienthello: over %d bytes", MaxBytes)
		}
		if n+5+size > len(stream) {
			// The record is not all here: say no at once to what cannot
			// become a ClientHello.
			if len(msg) == 0 && len(stream) > n+5 && stream[n+5] != typeClientHello {
				return Info{}, 0, fmt.Errorf("clienthello: handshake type %d, not ClientHello", stream[n+5])
			}
			return Info{}, 0, ErrIncomplete
		}
		msg = append(msg, stream[n+5:n+5+size]...)
		n += 5 + size
		if need < 0 && len(msg) >= 4 {
			if msg[0] != typeClientHello {
				return Info{}, 0, fmt.Errorf("clienthello: handshake type %d, not ClientHello", msg[0])
			}
			need = 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > MaxBytes {
				return Info{}, 0, fmt.Errorf("clienthello: a ClientHello of %d bytes (the limit is %d)", need, MaxBytes)
			}
		}
	}
}

// FromHandshake reads a ClientHello handshake message (type, length and
// body), as QUIC's CRYPTO frames carry it. It returns ErrIncomplete when
// msg is a valid beginning of one.
func FromHandshake(msg []byte) (Info, error) {
	if len(msg) < 4 {
		return Info{}, ErrIncomplete
	}
	if msg[0] != typeClientHello {
		return Info{}, fmt.Errorf("clienthello: handshake type %d, not ClientHello", msg[0])
	}
	size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	if 4+size > MaxBytes {
		return Info{}, fmt.Errorf("clienthello: a ClientHello of %d bytes (the limit is %d)", 4+size, MaxBytes)
	}
	if len(msg) < 4+size {
		return Info{}, ErrIncomplete
	}
	if len(msg) > 4+size {
		return Info{}, errors.New("clienthello: bytes after the ClientHello")
	}
	return parseBody(reader(msg[4:]))
}

// reader walks a byte string; a read past its end leaves it bad.
type reader []byte

func (r *reader) bytes(n int) ([]byte, bool) {
	if n < 0 || len(*r) < n {
		*r = nil
		return nil, false
	}
	b := (*r)[:n]
	*r = (*r)[n:]
	return b, true
}

func (r *reader) u8() (int, bool) {
	b, ok := r.bytes(1)
	if !ok {
		return 0, false
	}
	return int(b[0]), true
}

func (r *reader) u16() (int, bool) {
	b, ok := r.bytes(2)
	if !ok {
		return 0, false
	}
	return int(b[0])<<8 | int(b[1]), true
}

// vec reads a vector with a length prefix of 1 or 2 bytes.
func (r *reader) vec(prefix int) (reader, bool) {
	var n int
	var ok bool
	if prefix == 1 {
		n, ok = r.u8()
	} else {
		n, ok = r.u16()
	}
	if !ok {
		return nil, false
	}
	b, ok := r.bytes(n)
	return reader(b), ok
}

var errMalformed = errors.New("clienthello: malformed ClientHello")

func parseBody(r reader) (Info, error) {
	var info Info
	b, ok := r.bytes(2 + 32) // legacy_version, random
	if !ok {
		return info, errMalformed
	}
	info.Random = [32]byte(b[2:])
	if sid, ok := r.vec(1); !ok || len(sid) > 32 {
		return info, errMalformed
	}
	if cs, ok := r.vec(2); !ok || len(cs) < 2 || len(cs)%2 != 0 {
		return info, errMalformed
	}
	if cm, ok := r.vec(1); !ok || len(cm) < 1 {
		return info, errMalformed
	}
	if len(r) == 0 {
		return info, nil // no extensions (TLS 1.2 and older may omit them)
	}
	exts, ok := r.vec(2)
	if !ok || len(r) != 0 {
		return info, errMalformed
	}
	seen := map[int]bool{}
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return info, errMalformed
		}
		if seen[typ] {
			return info, fmt.Errorf("clienthello: extension %d twice", typ)
		}
		seen[typ] = true
		var err error
		switch typ {
		case extServerName:
			info.ServerName, err = serverName(data)
		case extALPN:
			info.ALPN, err = alpn(data)
		}
		if err != nil {
			return Info{}, err
		}
	}
	return info, nil
}

// serverName reads the server_name extension (RFC 6066 §3): one
// host_name.
func serverName(data reader) (string, error) {
	list, ok := data.vec(2)
	if !ok || len(data) != 0 || len(list) == 0 {
		return "", errMalformed
	}
	name := ""
	for len(list) > 0 {
		typ, ok1 := list.u8()
		v, ok2 := list.vec(2)
		if !ok1 || !ok2 {
			return "", errMalformed
		}
		if typ != 0 {
			continue // not host_name: no other type is defined
		}
		if name != "" {
			return "", errors.New("clienthello: two host names in server_name")
		}
		if len(v) == 0 {
			return "", errors.New("clienthello: empty host name in server_name")
		}
		name = string(v)
	}
	if !hostName(name) {
		return "", fmt.Errorf("clienthello: server name %q is not a host name", name)
	}
	return strings.TrimSuffix(strings.ToLower(name), "."), nil
}

// hostName reports whether s can be a DNS host name as SNI carries it:
// at most 255 bytes of letters, digits, hyphens, underscores and dots,
// without empty labels (a trailing dot aside).
func hostName(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	s = strings.TrimSuffix(s, ".")
	for _, label := range strings.Split(s, ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// alpn reads the application_layer_protocol_negotiation extension
// (RFC 7301 §3.1).
func alpn(data reader) ([]string, error) {
	list, ok := data.vec(2)
	if !ok || len(data) != 0 || len(list) == 0 {
		return nil, errMalformed
	}
	var out []string
	for len(list) > 0 {
		p, ok := list.vec(1)
		if !ok || len(p) == 0 {
			return nil, errMalformed
		}
		out = append(out, string(p))
	}
	return out, nil
}
