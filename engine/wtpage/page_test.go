package wtpage

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
	"time"
)

func cert(t *testing.T, key any, pub any, from, to time.Time) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"}, NotBefore: from, NotAfter: to}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCertificateHash: only what a browser takes by hash gets one.
func TestCertificateHash(t *testing.T) {
	now := time.Now()
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	day := 24 * time.Hour
	ok := cert(t, p256, &p256.PublicKey, now.Add(-time.Hour), now.Add(14*day-time.Hour))
	sum := sha256.Sum256(ok.Raw)
	if got := CertificateHash(ok, now); got != hex.EncodeToString(sum[:]) {
		t.Errorf("14-day P-256: %q, want its SHA-256", got)
	}
	for name, c := range map[string]*x509.Certificate{
		"15 days":     cert(t, p256, &p256.PublicKey, now.Add(-time.Hour), now.Add(15*day)),
		"expired":     cert(t, p256, &p256.PublicKey, now.Add(-3*day), now.Add(-day)),
		"not yet":     cert(t, p256, &p256.PublicKey, now.Add(day), now.Add(3*day)),
		"P-384":       cert(t, p384, &p384.PublicKey, now.Add(-time.Hour), now.Add(day)),
		"RSA":         cert(t, rsaKey, &rsaKey.PublicKey, now.Add(-time.Hour), now.Add(day)),
		"no leaf nil": nil,
	} {
		if got := CertificateHash(c, now); got != "" {
			t.Errorf("%s: %q, want none", name, got)
		}
	}
}

// TestRender: the limits are written in as JSON that cannot end the
// script block, and the policy hashes the page's own inline blocks.
func TestRender(t *testing.T) {
	p := New()
	out := string(p.Render(Limits{Path: "/x</script><script>alert(1)</script>", MaxBytesPerSession: 1 << 20}))
	if strings.Contains(out, "</script><script>alert(1)") || strings.Contains(out, placeholder) {
		t.Errorf("the rendered page carries the path as markup:\n%s", out)
	}
	if !strings.Contains(out, `"max_bytes_per_session":1048576`) || !strings.Contains(out, `"certificate_hashes":[]`) {
		t.Errorf("limits missing from the page")
	}
	if n := strings.Count(p.CSP(), "'sha256-"); n != 2 {
		t.Errorf("CSP %q hashes %d blocks, want the script and the style", p.CSP(), n)
	}
}
