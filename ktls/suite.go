package ktls

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// Constants from <linux/tls.h>; x/sys/unix does not export them.
const (
	solTLS           = 282 // SOL_TLS
	tlsTX            = 1   // TLS_TX
	tlsRX            = 2   // TLS_RX
	tlsSetRecordType = 1   // TLS_SET_RECORD_TYPE, a cmsg type for sendmsg

	version13 = 0x0304 // TLS_1_3_VERSION

	cipherAESGCM128        = 51 // TLS_CIPHER_AES_GCM_128
	cipherAESGCM256        = 52 // TLS_CIPHER_AES_GCM_256
	cipherChaCha20Poly1305 = 54 // TLS_CIPHER_CHACHA20_POLY1305
)

// Record content types (RFC 8446 §5.1).
const (
	RecordAlert           = 21
	RecordHandshake       = 22
	RecordApplicationData = 23
)

// Suite is a TLS 1.3 cipher suite in the kernel's terms.
type Suite struct {
	Name   string // IANA name
	ID     uint16 // TLS cipher suite number
	KeyLen int

	kernelCipher uint16
	// In struct tls12_crypto_info_*: the 12-byte TLS 1.3 IV is split into
	// salt (first saltLen bytes) and iv (the rest). ChaCha20 keeps all 12
	// in iv and has no salt.
	saltLen int
	// v12 marks a TLS 1.2 suite (userspace only here); sha384 its PRF hash.
	v12    bool
	sha384 bool
}

func (s Suite) tls12() bool { return s.v12 }

// explicitNonce: TLS 1.2 AES-GCM sends 8 bytes of nonce in each record.
func (s Suite) explicitNonce() bool { return s.v12 && s.saltLen == 4 }

// The TLS 1.3 suites the kernel offers: AES-GCM since Linux 4.13 (commit
// 3c4d7559159b "tls: kernel TLS support"; TLS 1.3 from 5.1),
// ChaCha20-Poly1305 since 5.11 (the "net/tls: add CHACHA20-POLY1305"
// series).
var (
	AES128GCM        = Suite{Name: "TLS_AES_128_GCM_SHA256", ID: 0x1301, KeyLen: 16, kernelCipher: cipherAESGCM128, saltLen: 4}
	AES256GCM        = Suite{Name: "TLS_AES_256_GCM_SHA384", ID: 0x1302, KeyLen: 32, kernelCipher: cipherAESGCM256, saltLen: 4}
	ChaCha20Poly1305 = Suite{Name: "TLS_CHACHA20_POLY1305_SHA256", ID: 0x1303, KeyLen: 32, kernelCipher: cipherChaCha20Poly1305}
)

// Suites lists the TLS 1.3 suites in the order they are probed.
func Suites() []Suite { return []Suite{AES128GCM, AES256GCM, ChaCha20Poly1305} }

// SuiteByID returns the suite with a TLS cipher suite number (TLS 1.3, or
// one of the TLS 1.2 AEAD suites).
func SuiteByID(id uint16) (Suite, bool) {
	for _, s := range append(Suites(), TLS12Suites()...) {
		if s.ID == id {
			return s, true
		}
	}
	return Suite{}, false
}

// Keys is one direction's traffic key: the key and the 12-byte IV derived
// from a traffic secret (RFC 8446 §7.3).
type Keys struct {
	Suite Suite
	Key   []byte
	IV    [12]byte
}

func (k Keys) check() error {
	if len(k.Key) != k.Suite.KeyLen || k.Suite.KeyLen == 0 {
		return fmt.Errorf("ktls: %s key is %d bytes, want %d", k.Suite.Name, len(k.Key), k.Suite.KeyLen)
	}
	return nil
}

// cryptoInfo lays out struct tls12_crypto_info_{aes_gcm_128,aes_gcm_256,
// chacha20_poly1305} for TLS 1.3 with the next record sequence number seq:
//
//	u16 version; u16 cipher_type; u8 iv[]; u8 key[]; u8 salt[]; u8 rec_seq[8];
//
// (little-endian header, as the kernel reads it on the machines we run on;
// rec_seq is big-endian, as on the wire).
func cryptoInfo(k Keys, seq uint64) ([]byte, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if k.Suite.v12 {
		return nil, fmt.Errorf("ktls: %s: TLS 1.2 connections stay in userspace", k.Suite.Name)
	}
	s := k.Suite
	b := make([]byte, 0, 4+12+s.KeyLen+8)
	b = binary.NativeEndian.AppendUint16(b, version13)
	b = binary.NativeEndian.AppendUint16(b, s.kernelCipher)
	b = append(b, k.IV[s.saltLen:]...) // iv
	b = append(b, k.Key...)            // key
	b = append(b, k.IV[:s.saltLen]...) // salt
	return binary.BigEndian.AppendUint64(b, seq), nil
}

func newAEAD(k Keys) (cipher.AEAD, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if k.Suite.kernelCipher == cipherChaCha20Poly1305 {
		return chacha20poly1305.New(k.Key)
	}
	block, err := aes.NewCipher(k.Key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// ErrRecordLimit means a key has protected as many records as it safely
// can; the connection must rekey or close.
var ErrRecordLimit = errors.New("ktls: record limit for this key reached")
