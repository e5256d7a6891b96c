package engine

import (
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/wtpage"
)

// diagPage fills resp with the WebTransport diagnostics page (package
// wtpage) for a request routed by d.pageHost, and d's policy with the page's
// fields. The page carries the endpoint's limits, and the hash of the
// certificate that host is served with when a browser may take it by its hash
// (a self-signed or private one, at most 14 days, ECDSA P-256): the
// page's sessions then pass it as serverCertificateHashes.
func (s *Server) diagPage(resp *files.Response, d *decision) {
	w := &s.cfg.WebTransport
	l := wtpage.Limits{
		Path:                 w.Path,
		MaxStreamsPerSession: w.MaxStreamsPerSession,
		MaxDatagramBytes:     w.MaxDatagramBytes,
		MaxBytesPerSession:   int64(w.MaxBytesPerSession),
		IdleTimeoutMS:        w.IdleTimeout.D().Milliseconds(),
		Autorun:              d.pageAutorun,
	}
	if s.certs != nil {
		if c, _ := s.certs.getCertificate(&tls.ClientHelloInfo{ServerName: d.pageHost}); c != nil && len(c.Certificate) > 0 {
			leaf := c.Leaf
			if leaf == nil {
				leaf, _ = x509.ParseCertificate(c.Certificate[0])
			}
			if h := wtpage.CertificateHash(leaf, time.Now()); h != "" {
				l.CertificateHashes = []string{h}
			}
		}
	}
	body := s.wtPage.Render(l)
	*resp = files.Response{Status: 200, ContentType: "text/html; charset=utf-8", ContentLength: int64(len(body)),
		Parts: []files.Part{{Mem: body, Len: int64(len(body))}}}
	d.pr = policy.Resp{TLS: true, Stored: [][3]string{
		{"cache-control", "Cache-Control", "no-store"},
		{"content-security-policy", "Content-Security-Policy", s.wtPage.CSP()},
		{"x-content-type-options", "X-Content-Type-Options", "nosniff"},
		{"referrer-policy", "Referrer-Policy", "no-referrer"},
	}}
}
