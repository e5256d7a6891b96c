package ktls

import (
	"crypto"
	"crypto/hmac"
	"errors"
)

// The TLS 1.2 suites the engine offers to clients without TLS 1.3: ECDHE
// with AEAD ciphers only. Their records stay in userspace.
var (
	ecdheECDSAAES128GCM = Suite{Name: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", ID: 0xc02b, KeyLen: 16, kernelCipher: cipherAESGCM128, saltLen: 4, v12: true}
	ecdheRSAAES128GCM   = Suite{Name: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", ID: 0xc02f, KeyLen: 16, kernelCipher: cipherAESGCM128, saltLen: 4, v12: true}
	ecdheECDSAAES256GCM = Suite{Name: "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", ID: 0xc02c, KeyLen: 32, kernelCipher: cipherAESGCM256, saltLen: 4, v12: true, sha384: true}
	ecdheRSAAES256GCM   = Suite{Name: "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", ID: 0xc030, KeyLen: 32, kernelCipher: cipherAESGCM256, saltLen: 4, v12: true, sha384: true}
	ecdheECDSAChaCha    = Suite{Name: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", ID: 0xcca9, KeyLen: 32, kernelCipher: cipherChaCha20Poly1305, v12: true}
	ecdheRSAChaCha      = Suite{Name: "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", ID: 0xcca8, KeyLen: 32, kernelCipher: cipherChaCha20Poly1305, v12: true}
)

// TLS12Suites lists them; TLS12SuiteIDs is the list for tls.Config.
func TLS12Suites() []Suite {
	return []Suite{ecdheECDSAAES128GCM, ecdheRSAAES128GCM, ecdheECDSAAES256GCM, ecdheRSAAES256GCM, ecdheECDSAChaCha, ecdheRSAChaCha}
}

// TLS12SuiteIDs are the TLS 1.2 cipher suite numbers for tls.Config.CipherSuites.
func TLS12SuiteIDs() []uint16 {
	var ids []uint16
	for _, s := range TLS12Suites() {
		ids = append(ids, s.ID)
	}
	return ids
}

// prf12 is the TLS 1.2 PRF, P_hash (RFC 5246 §5).
func prf12(h crypto.Hash, secret []byte, label string, seed []byte, n int) []byte {
	labelSeed := append([]byte(label), seed...)
	out := make([]byte, 0, n+h.Size())
	a := labelSeed
	for len(out) < n {
		m := hmac.New(h.New, secret)
		m.Write(a)
		a = m.Sum(nil)
		m = hmac.New(h.New, secret)
		m.Write(a)
		m.Write(labelSeed)
		out = m.Sum(out)
	}
	return out[:n]
}

// keys12 derives both directions' keys from a TLS 1.2 master secret
// (RFC 5246 §6.3): key_block = PRF(master, "key expansion", server_random
// + client_random), split into client key, server key, client IV, server
// IV (the AEAD suites have no MAC keys).
func keys12(s Suite, master, clientRandom, serverRandom []byte) (client, server Keys, err error) {
	if len(clientRandom) != 32 || len(serverRandom) != 32 {
		return client, server, errors.New("ktls: TLS 1.2 randoms must be 32 bytes")
	}
	ivLen := 12
	if s.saltLen == 4 {
		ivLen = 4 // the implicit part; 8 more bytes travel in each record
	}
	seed := append(append([]byte(nil), serverRandom...), clientRandom...)
	kb := prf12(s.hash(), master, "key expansion", seed, 2*s.KeyLen+2*ivLen)
	client = Keys{Suite: s, Key: kb[:s.KeyLen]}
	server = Keys{Suite: s, Key: kb[s.KeyLen : 2*s.KeyLen]}
	copy(client.IV[:], kb[2*s.KeyLen:2*s.KeyLen+ivLen])
	copy(server.IV[:], kb[2*s.KeyLen+ivLen:])
	return client, server, nil
}
