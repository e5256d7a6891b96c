package ktls

import (
	"bytes"
	"errors"
	"testing"
)

func testKeys(s Suite, seed byte) Keys {
	k := Keys{Suite: s, Key: make([]byte, s.KeyLen)}
	for i := range k.Key {
		k.Key[i] = seed + byte(i)*7
	}
	for i := range k.IV {
		k.IV[i] = seed ^ byte(0xa0+i)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	for _, s := range Suites() {
		k := testKeys(s, 3)
		seal, _ := NewSealer(k, 5)
		open, _ := NewOpener(k, 5)
		var wire []byte
		msgs := [][]byte{[]byte("hello"), bytes.Repeat([]byte{0xab}, MaxPlaintext), {}, []byte("alert")}
		types := []byte{RecordApplicationData, RecordApplicationData, RecordHandshake, RecordAlert}
		for i, m := range msgs {
			var err error
			if wire, err = seal.Seal(wire, types[i], m); err != nil {
				t.Fatal(err)
			}
		}
		for i, m := range msgs {
			rec, err := open.Open(wire)
			if err != nil || rec == nil {
				t.Fatalf("%s: record %d: %v", s.Name, i, err)
			}
			if rec.Type != types[i] || !bytes.Equal(rec.Data, m) {
				t.Errorf("%s: record %d = type %d, %d bytes; want %d, %d", s.Name, i, rec.Type, len(rec.Data), types[i], len(m))
			}
			wire = wire[rec.Wire:]
		}
		if seal.Seq() != 9 || open.Seq() != 9 {
			t.Errorf("%s: sequence %d/%d, want 9", s.Name, seal.Seq(), open.Seq())
		}
	}
}

func TestOpenRejects(t *testing.T) {
	k := testKeys(AES128GCM, 1)
	seal, _ := NewSealer(k, 0)
	good, _ := seal.Seal(nil, RecordApplicationData, []byte("data"))

	// Incomplete records wait for more bytes.
	o, _ := NewOpener(k, 0)
	for i := 0; i < len(good); i++ {
		if rec, err := o.Open(good[:i]); rec != nil || err != nil {
			t.Fatalf("Open(%d of %d bytes) = %v, %v; want nil, nil", i, len(good), rec, err)
		}
	}
	tamper := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for name, rec := range map[string][]byte{
		"flipped tag":   tamper(func(b []byte) { b[len(b)-1] ^= 1 }),
		"flipped body":  tamper(func(b []byte) { b[6] ^= 1 }),
		"wrong type":    tamper(func(b []byte) { b[0] = RecordHandshake }),
		"wrong version": tamper(func(b []byte) { b[2] = 1 }),
		"huge length":   {23, 3, 3, 0xff, 0xff},
		"too short":     {23, 3, 3, 0, 3, 1, 2, 3},
	} {
		o, _ := NewOpener(k, 0)
		if _, err := o.Open(rec); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: err %v, want ErrBadRecord", name, err)
		}
	}
	// The wrong sequence number fails authentication.
	o, _ = NewOpener(k, 1)
	if _, err := o.Open(good); !errors.Is(err, ErrBadRecord) {
		t.Errorf("wrong sequence: %v", err)
	}
	if _, err := seal.Seal(nil, RecordApplicationData, make([]byte, MaxPlaintext+1)); err == nil {
		t.Error("oversized record sealed")
	}
}

func TestCryptoInfoLayout(t *testing.T) {
	// struct tls12_crypto_info_aes_gcm_128 is 40 bytes; the aes_gcm_256 and
	// chacha20_poly1305 variants 56 (<linux/tls.h>).
	for _, tt := range []struct {
		s    Suite
		size int
	}{{AES128GCM, 40}, {AES256GCM, 56}, {ChaCha20Poly1305, 56}} {
		k := testKeys(tt.s, 9)
		b, err := cryptoInfo(k, 0x0102030405060708)
		if err != nil || len(b) != tt.size {
			t.Fatalf("%s: %d bytes, %v; want %d", tt.s.Name, len(b), err, tt.size)
		}
		salt := tt.s.saltLen
		iv := b[4 : 4+12-salt]
		key := b[4+12-salt : 4+12-salt+tt.s.KeyLen]
		gotSalt := b[4+12-salt+tt.s.KeyLen : 4+12+tt.s.KeyLen]
		seq := b[len(b)-8:]
		if !bytes.Equal(iv, k.IV[salt:]) || !bytes.Equal(key, k.Key) || !bytes.Equal(gotSalt, k.IV[:salt]) ||
			!bytes.Equal(seq, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Errorf("%s: layout % x", tt.s.Name, b)
		}
	}
	if _, err := cryptoInfo(Keys{Suite: AES128GCM, Key: make([]byte, 5)}, 0); err == nil {
		t.Error("short key accepted")
	}
}

func BenchmarkSeal16K(b *testing.B) {
	k := testKeys(AES128GCM, 1)
	s, _ := NewSealer(k, 0)
	data := make([]byte, MaxPlaintext)
	buf := make([]byte, 0, MaxPlaintext+64)
	b.ReportAllocs()
	b.SetBytes(MaxPlaintext)
	for b.Loop() {
		buf, _ = s.Seal(buf[:0], RecordApplicationData, data)
	}
}

func FuzzRecord(f *testing.F) {
	k := testKeys(ChaCha20Poly1305, 2)
	k12 := testKeys(ecdheECDSAAES128GCM, 3)
	s, _ := NewSealer(k, 0)
	good, _ := s.Seal(nil, RecordApplicationData, []byte("seed"))
	s12, _ := NewSealer(k12, 0)
	good12, _ := s12.Seal(nil, RecordHandshake, []byte("seed 1.2"))
	f.Add(good, false)
	f.Add(good12, true)
	f.Add([]byte{23, 3, 3, 0, 17}, false)
	f.Fuzz(func(t *testing.T, b []byte, v12 bool) {
		key := k
		if v12 {
			key = k12
		}
		o, _ := NewOpener(key, 0)
		for len(b) > 0 {
			rec, err := o.Open(b)
			if err != nil || rec == nil {
				return
			}
			if rec.Wire <= 0 || rec.Wire > len(b) || len(rec.Data) > MaxPlaintext {
				t.Fatalf("record %+v from %d bytes", rec, len(b))
			}
			b = b[rec.Wire:]
		}
	})
}
