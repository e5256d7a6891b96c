// Package wtpage is the WebTransport diagnostics page: a static page the
// engine serves to a GET of [webtransport] path, which runs the
// endpoint's echo, source and datagram modes from a browser and shows
// throughput, datagram loss and how each session closed
// (docs/WEBTRANSPORT.md, "From a browser").
//
// It holds no state and talks to nothing: Render writes the endpoint's
// limits (and the certificate's hash, when a browser may take the
// certificate by its hash) into the page, and the browser does the rest.
// Invariant: the page's script refuses nothing the endpoint would
// accept, so every check in it is one of the endpoint's limits, given by
// Render.
package wtpage

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"time"
)

//go:embed page.html
var page []byte

// Limits are the endpoint's, as the page needs them.
type Limits struct {
	Path                 string `json:"path"`
	MaxStreamsPerSession int    `json:"max_streams_per_session"`
	MaxDatagramBytes     int    `json:"max_datagram_bytes"`
	MaxBytesPerSession   int64  `json:"max_bytes_per_session"`
	IdleTimeoutMS        int64  `json:"idle_timeout_ms"`
	// Autorun lets ?run=1 start the tests when the page loads; without
	// it (another site led to the page) the page waits for its button.
	Autorun bool `json:"autorun"`
	// CertificateHashes are hex SHA-256 digests of the certificates the
	// page passes as serverCertificateHashes (CertificateHash); none
	// when the certificate is one browsers verify by its chain.
	CertificateHashes []string `json:"certificate_hashes"`
}

// Page is the page's template and the Content-Security-Policy that lets
// its own script and style run and nothing else.
type Page struct {
	before, after []byte
	csp           string
}

const placeholder = "{{CONFIG}}"

// New splits the page at its placeholder and hashes its inline script
// and style for the policy.
func New() *Page {
	before, after, ok := bytes.Cut(page, []byte(placeholder))
	if !ok {
		panic("wtpage: page.html has no " + placeholder)
	}
	p := &Page{before: before, after: after}
	p.csp = "default-src 'none'; script-src " + inlineHashes(`(?s)<script>(.*?)</script>`) +
		"; style-src " + inlineHashes(`(?s)<style>(.*?)</style>`) +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return p
}

// inlineHashes is the CSP source list ('sha256-…') of the inline blocks
// of the page that re matches.
func inlineHashes(re string) string {
	var out []byte
	for _, m := range regexp.MustCompile(re).FindAllSubmatch(page, -1) {
		sum := sha256.Sum256(m[1])
		if out != nil {
			out = append(out, ' ')
		}
		out = append(out, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'"...)
	}
	return string(out)
}

// CSP is the Content-Security-Policy the page is served with.
func (p *Page) CSP() string { return p.csp }

// Render returns the page with l written in. encoding/json escapes <, >
// and &, so nothing in l can end the script block it sits in.
func (p *Page) Render(l Limits) []byte {
	if l.CertificateHashes == nil {
		l.CertificateHashes = []string{}
	}
	cfg, err := json.Marshal(l)
	if err != nil {
		panic(err) // a struct of strings and numbers always marshals
	}
	out := make([]byte, 0, len(p.before)+len(cfg)+len(p.after))
	return append(append(append(out, p.before...), cfg...), p.after...)
}

// MaxHashValidity is the longest validity a browser accepts of a
// certificate it verifies by hash (W3C WebTransport,
// "serverCertificateHashes": at most two weeks).
const MaxHashValidity = 14 * 24 * time.Hour

// CertificateHash returns the hex SHA-256 of leaf when a browser would
// accept it by its hash: an ECDSA P-256 key (the one algorithm every
// browser must take; RSA is refused), a validity period of at most 14
// days, and now within it. Otherwise it returns "".
func CertificateHash(leaf *x509.Certificate, now time.Time) string {
	if leaf == nil {
		return ""
	}
	k, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() || leaf.NotAfter.Sub(leaf.NotBefore) > MaxHashValidity ||
		now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return ""
	}
	sum := sha256.Sum256(leaf.Raw)
	return hex.EncodeToString(sum[:])
}
