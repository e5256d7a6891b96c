package bench

import (
	"crypto/tls"
	"fmt"
	"sort"
	"strings"
)

// keyExchangeName names a TLS key exchange as engine.toml's key_exchanges
// and OpenSSL's clients do ("X25519MLKEM768", "X25519", "P-256"); one it
// does not know as crypto/tls does.
func keyExchangeName(id tls.CurveID) string {
	switch id {
	case tls.CurveP256:
		return "P-256"
	case tls.CurveP384:
		return "P-384"
	case tls.CurveP521:
		return "P-521"
	case 0:
		return "none" // TLS 1.3 resumption without (EC)DHE
	}
	return id.String() // X25519, X25519MLKEM768, SecP256r1MLKEM768, ...
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

// ParseKeyExchange reads a key exchange from what OpenSSL calls it
// ("x25519", "prime256v1", "secp384r1", "X25519MLKEM768"), in the names
// keyExchangeName gives; "" when s names none of them.
func ParseKeyExchange(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "x25519":
		return "X25519"
	case "x448":
		return "X448"
	case "prime256v1", "secp256r1", "p-256":
		return "P-256"
	case "secp384r1", "p-384":
		return "P-384"
	case "secp521r1", "p-521":
		return "P-521"
	case "x25519mlkem768":
		return "X25519MLKEM768"
	case "secp256r1mlkem768":
		return "SecP256r1MLKEM768"
	case "secp384r1mlkem1024":
		return "SecP384r1MLKEM1024"
	}
	return ""
}
