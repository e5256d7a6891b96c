package config

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// keyExchange is a TLS group key_exchanges can name: the names operators
// write for it (the first one is the one messages use), and whether it
// is a post-quantum hybrid, which only TLS 1.3 negotiates.
type keyExchange struct {
	names  []string
	id     tls.CurveID
	hybrid bool
}

// keyExchanges are the groups crypto/tls offers, in its default order.
var keyExchanges = []keyExchange{
	{[]string{"X25519MLKEM768"}, tls.X25519MLKEM768, true},
	{[]string{"SecP256r1MLKEM768"}, tls.SecP256r1MLKEM768, true},
	{[]string{"SecP384r1MLKEM1024"}, tls.SecP384r1MLKEM1024, true},
	{[]string{"X25519"}, tls.X25519, false},
	{[]string{"P-256", "secp256r1", "prime256v1"}, tls.CurveP256, false},
	{[]string{"P-384", "secp384r1"}, tls.CurveP384, false},
	{[]string{"P-521", "secp521r1"}, tls.CurveP521, false},
}

// KeyExchangeName is the name key_exchanges uses for a group crypto/tls
// negotiated ("X25519MLKEM768", "P-256"); one it does not list is named
// as crypto/tls names it.
func KeyExchangeName(id tls.CurveID) string {
	for _, k := range keyExchanges {
		if k.id == id {
			return k.names[0]
		}
	}
	return id.String()
}

// lookupKeyExchange finds a group by any of its names, ignoring case.
func lookupKeyExchange(name string) (keyExchange, bool) {
	name = strings.TrimSpace(name)
	for _, k := range keyExchanges {
		for _, n := range k.names {
			if strings.EqualFold(n, name) {
				return k, true
			}
		}
	}
	return keyExchange{}, false
}

// validateKeyExchanges resolves t.KeyExchanges into t.Groups; key is the
// TLS table's ("sites[0].tls").
func (c *Config) validateKeyExchanges(key string, t *TLS, errs *Errors) {
	t.Groups = nil
	if t.KeyExchanges == nil {
		return
	}
	key += ".key_exchanges"
	if len(t.KeyExchanges) == 0 {
		errs.add(c.errAt(key, "empty; list at least one key exchange, or remove the key for the default order (X25519MLKEM768 first)"))
		return
	}
	classic, bad := false, false
	for _, name := range t.KeyExchanges {
		k, ok := lookupKeyExchange(name)
		if !ok {
			var valid []string
			for _, k := range keyExchanges {
				valid = append(valid, fmt.Sprintf("%q", k.names[0]))
			}
			errs.add(c.errAt(key, "%q is not a key exchange; expected some of %s (case is ignored; \"secp256r1\", \"prime256v1\", \"secp384r1\" and \"secp521r1\" are accepted too)", name, strings.Join(valid, ", ")))
			bad = true
			continue
		}
		if slices.Contains(t.Groups, k.id) {
			errs.add(c.errAt(key, "%q is listed twice (as %q); list each key exchange once", name, k.names[0]))
			bad = true
			continue
		}
		t.Groups = append(t.Groups, k.id)
		classic = classic || !k.hybrid
	}
	if !bad && !classic && t.MinVersion == "1.2" {
		errs.add(c.errAt(key, "lists only post-quantum hybrids, which TLS 1.2 cannot negotiate, and min_version is \"1.2\"; add \"X25519\" or \"P-256\" for TLS 1.2 clients, or remove min_version"))
	}
}
