package ktls

import (
	"bytes"
	"crypto"
	"crypto/hkdf"
	_ "crypto/sha256" // SHA-256 for the AES-128-GCM and ChaCha20 suites
	_ "crypto/sha512" // SHA-384 for AES-256-GCM
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// hash is the suite's transcript and HKDF hash (RFC 8446 §B.4).
func (s Suite) hash() crypto.Hash {
	if s.ID == AES256GCM.ID || s.sha384 {
		return crypto.SHA384
	}
	return crypto.SHA256
}

// expandLabel is HKDF-Expand-Label (RFC 8446 §7.1):
//
//	struct { uint16 length; opaque label<7..255> = "tls13 " + Label;
//	         opaque context<0..255>; } HkdfLabel;
func expandLabel(h crypto.Hash, secret []byte, label string, context []byte, length int) ([]byte, error) {
	info := make([]byte, 0, 2+1+6+len(label)+1+len(context))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, byte(len(context)))
	info = append(info, context...)
	return hkdf.Expand(h.New, secret, string(info), length)
}

// TrafficKeys derives the record key and IV from a TLS 1.3 traffic secret
// (RFC 8446 §7.3).
func TrafficKeys(s Suite, secret []byte) (Keys, error) {
	key, err := expandLabel(s.hash(), secret, "key", nil, s.KeyLen)
	if err != nil {
		return Keys{}, err
	}
	iv, err := expandLabel(s.hash(), secret, "iv", nil, 12)
	if err != nil {
		return Keys{}, err
	}
	k := Keys{Suite: s, Key: key}
	copy(k.IV[:], iv)
	return k, nil
}

// NextSecret is the traffic secret after a KeyUpdate (RFC 8446 §7.2):
// application_traffic_secret_N+1 = HKDF-Expand-Label(secret_N, "traffic upd", "", Hash.length).
func NextSecret(s Suite, secret []byte) ([]byte, error) {
	return expandLabel(s.hash(), secret, "traffic upd", nil, s.hash().Size())
}

// keyLog collects the secrets crypto/tls writes to a KeyLogWriter, in the
// NSS key log format: "LABEL <client random hex> <secret hex>\n".
type keyLog struct {
	// mu guards secrets and clientRandom: crypto/tls calls Write from
	// inside the handshake, and session reads them (get, random) after it.
	mu           sync.Mutex
	secrets      map[string][]byte // guarded by mu; label -> secret
	clientRandom []byte            // guarded by mu
}

func (k *keyLog) Write(line []byte) (int, error) {
	f := bytes.Fields(line)
	if len(f) != 3 {
		return 0, fmt.Errorf("ktls: key log line with %d fields", len(f))
	}
	secret := make([]byte, hex.DecodedLen(len(f[2])))
	if _, err := hex.Decode(secret, f[2]); err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.secrets == nil {
		k.secrets = map[string][]byte{}
	}
	k.secrets[string(f[0])] = secret
	if r, err := hex.DecodeString(string(f[1])); err == nil {
		k.clientRandom = r
	}
	return len(line), nil
}

func (k *keyLog) get(label string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.secrets[label]
}

// random returns the client random of the logged lines.
func (k *keyLog) random() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.clientRandom
}

// errNoSecret means crypto/tls did not log a secret we need.
var errNoSecret = errors.New("ktls: traffic secret missing from the key log")
