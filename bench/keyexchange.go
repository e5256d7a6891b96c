package bench

import (
	"crypto/tls"
	"fmt"
	"sort"
	"strings"
)

// keyExchangeNames are the TLS key exchanges by the names engine.toml's
// key_exchanges uses, with the other names OpenSSL's tools print or take
// for them.
var keyExchangeNames = []struct {
	name    string
	aliases []string
	id      tls.CurveID
}{
	{"X25519MLKEM768", nil, tls.X25519MLKEM768},
	{"SecP256r1MLKEM768", nil, tls.SecP256r1MLKEM768},
	{"SecP384r1MLKEM1024", nil, tls.SecP384r1MLKEM1024},
	{"X25519", nil, tls.X25519},
	{"P-256", []string{"secp256r1", "prime256v1"}, tls.CurveP256},
	{"P-384", []string{"secp384r1"}, tls.CurveP384},
	{"P-521", []string{"secp521r1"}, tls.CurveP521},
}

// keyExchangeName names a negotiated key exchange as key_exchanges does
// ("X25519MLKEM768", "X25519", "P-256"); one it does not know as
// crypto/tls does.
func keyExchangeName(id tls.CurveID) string {
	if id == 0 {
		return "none" // TLS 1.3 resumption without (EC)DHE
	}
	for _, k := range keyExchangeNames {
		if k.id == id {
			return k.name
		}
	}
	return id.String()
}

// LookupKeyExchange finds a key exchange by any of its names, ignoring
// case ("x25519", "prime256v1", "P-384"): its name as key_exchanges
// writes it, and crypto/tls's ID; ok is false for a name it does not
// know.
func LookupKeyExchange(s string) (name string, id tls.CurveID, ok bool) {
	s = strings.TrimSpace(s)
	for _, k := range keyExchangeNames {
		if strings.EqualFold(s, k.name) {
			return k.name, k.id, true
		}
		for _, a := range k.aliases {
			if strings.EqualFold(s, a) {
				return k.name, k.id, true
			}
		}
	}
	return "", 0, false
}

// KeyExchangeNames lists the names LookupKeyExchange knows.
func KeyExchangeNames() []string {
	var out []string
	for _, k := range keyExchangeNames {
		out = append(out, k.name)
	}
	return out
}

// KeyExchangeCounts writes counts by key exchange as "X25519 ×120",
// most first.
func KeyExchangeCounts(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s ×%d", n, m[n])
	}
	return strings.Join(parts, ", ")
}

// KeyExchangeOf names the key exchange a TLS connection negotiated.
func KeyExchangeOf(cs tls.ConnectionState) string { return keyExchangeName(cs.CurveID) }
