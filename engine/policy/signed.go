package policy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/integrity"
)

// A signed URL carries its signature in these query parameters. The
// README ("Signed URLs") gives the format for signers in any language:
//
//	exp    expiry, Unix seconds: the URL is refused after it
//	kid    the id of the [signing] key that signed it
//	scope  with a path prefix ending in "/": the signature covers every
//	       path under it (a model's shards), instead of one path
//	ip     optional: an address or prefix the client's address must be in
//	sig    base64url (no padding) of HMAC-SHA-256(secret, StringToSign)
//
// The signed path is the path as the site reads it: percent-decoded,
// without "." segments or repeated slashes (config.NormalPath), which is
// what the engine serves; a request whose path says the same in another
// spelling ("/a//b", "/a/./b", "/%61/b") is the same request, and one
// that leaves the scope by ".." is refused before it is matched.
const (
	ParamExpires = "exp"
	ParamKeyID   = "kid"
	ParamScope   = "scope"
	ParamIP      = "ip"
	ParamSig     = "sig"
)

// SigAlgorithm opens every string to sign: a version, so the format can
// change without a signature of one read as the other's.
const SigAlgorithm = "ENGINE-HMAC-SHA256"

// StringToSign is what a URL's signature is the HMAC of: lines joined
// by "\n", without a final one:
//
//	ENGINE-HMAC-SHA256
//	<kid>
//	<exp>
//	<ip, or empty>
//	path | prefix
//	<the path, or the scope's prefix>
func StringToSign(kid string, exp int64, ip, mode, path string) string {
	return SigAlgorithm + "\n" + kid + "\n" + strconv.FormatInt(exp, 10) + "\n" + ip + "\n" + mode + "\n" + path
}

// Keys are the signing secrets by key id. Immutable.
type Keys struct{ m map[string][]byte }

// LoadKeys reads every key file of [signing] keys (id -> path).
func LoadKeys(files map[string]string) (*Keys, error) {
	k := &Keys{m: map[string][]byte{}}
	for id, name := range files {
		b, err := config.ReadSecret(name)
		if err != nil {
			return nil, fmt.Errorf("signing key %s: %w", id, err)
		}
		k.m[id] = b
	}
	return k, nil
}

// IDs lists the key ids, sorted.
func (k *Keys) IDs() []string {
	ids := make([]string, 0, len(k.m))
	for id := range k.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// SignRequest is what a signature covers.
type SignRequest struct {
	KeyID   string
	Path    string // a normal path (config.NormalPath)
	Prefix  bool   // the signature covers every path under Path, which ends in "/"
	Expires time.Time
	// IP, when valid, is the address or prefix the client must be in.
	IP netip.Prefix
}

// Sign returns the query (without "?") that signs r.
func (k *Keys) Sign(r SignRequest) (string, error) {
	secret, ok := k.m[r.KeyID]
	if !ok {
		return "", fmt.Errorf("no signing key %q; the configuration has %s", r.KeyID, strings.Join(k.IDs(), ", "))
	}
	if !config.NormalPath(r.Path) {
		return "", fmt.Errorf("%q is not a path as the site reads it: it must start with \"/\", without \"%%\", \"?\", \"//\", or \".\" and \"..\" segments (write the path decoded)", r.Path)
	}
	if r.Prefix && !strings.HasSuffix(r.Path, "/") {
		return "", fmt.Errorf("a prefix signature covers a directory: %q must end in \"/\"", r.Path)
	}
	mode := "path"
	if r.Prefix {
		mode = "prefix"
	}
	ip := ""
	if r.IP.IsValid() {
		ip = ipString(r.IP)
	}
	exp := r.Expires.Unix()
	sig := mac(secret, StringToSign(r.KeyID, exp, ip, mode, r.Path))
	q := ParamExpires + "=" + strconv.FormatInt(exp, 10) + "&" + ParamKeyID + "=" + url.QueryEscape(r.KeyID)
	if r.Prefix {
		q += "&" + ParamScope + "=" + escapeScope(r.Path)
	}
	if ip != "" {
		q += "&" + ParamIP + "=" + url.QueryEscape(ip)
	}
	return q + "&" + ParamSig + "=" + base64.RawURLEncoding.EncodeToString(sig), nil
}

// escapeScope writes a path as a query value, keeping its slashes
// readable.
func escapeScope(p string) string {
	return strings.ReplaceAll(url.QueryEscape(p), "%2F", "/")
}

// ipString writes an address alone, a prefix with its length.
func ipString(p netip.Prefix) string {
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

func mac(secret []byte, s string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// Why a signed URL is refused; the client is told none of it (403).
var (
	ErrUnsigned   = errors.New("no signature")
	ErrMalformed  = errors.New("malformed signature parameters")
	ErrUnknownKey = errors.New("unknown key id")
	ErrBadSig     = errors.New("bad signature")
	ErrExpired    = errors.New("expired")
	ErrScope      = errors.New("path outside the signature's scope")
	ErrAddress    = errors.New("client address outside the signature's")
)

// sigParams are a request's signature parameters.
type sigParams struct {
	exp         int64
	kid, scope  string
	ip          string
	sig         []byte
	hasScope    bool
	seen        uint8
	hasExp, bad bool
}

// parseSig reads the signature parameters of a raw query. A parameter
// given twice makes it malformed: a signer and a server must never read
// two URLs out of one.
func parseSig(query []byte) (sigParams, error) {
	var p sigParams
	q := string(query)
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		var bit uint8
		switch k {
		case ParamExpires:
			bit = 1
		case ParamKeyID:
			bit = 2
		case ParamScope:
			bit = 4
		case ParamIP:
			bit = 8
		case ParamSig:
			bit = 16
		default:
			continue
		}
		if p.seen&bit != 0 {
			return p, ErrMalformed
		}
		p.seen |= bit
		val, err := url.QueryUnescape(v)
		if err != nil {
			return p, ErrMalformed
		}
		switch bit {
		case 1:
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return p, ErrMalformed
			}
			p.exp = n
		case 2:
			p.kid = val
		case 4:
			p.scope, p.hasScope = val, true
		case 8:
			p.ip = val
		case 16:
			s, err := base64.RawURLEncoding.DecodeString(val)
			if err != nil || len(s) != sha256.Size {
				return p, ErrMalformed
			}
			p.sig = s
		}
	}
	if p.seen&(1|2|16) == 0 {
		return p, ErrUnsigned
	}
	if p.seen&(1|2|16) != 1|2|16 {
		return p, ErrMalformed
	}
	return p, nil
}

// Verify checks the signature of a request for clean (the path as the
// site reads it) with raw query from client at now. nil means it may
// pass.
func (k *Keys) Verify(query, clean []byte, client netip.Addr, now time.Time) error {
	if k == nil {
		return ErrUnknownKey
	}
	p, err := parseSig(query)
	if err != nil {
		return err
	}
	secret, ok := k.m[p.kid]
	if !ok {
		return ErrUnknownKey
	}
	mode, signed := "path", string(clean)
	if p.hasScope {
		mode, signed = "prefix", p.scope
	}
	ok = hmac.Equal(mac(secret, StringToSign(p.kid, p.exp, p.ip, mode, signed)), p.sig)
	if t, tree := strings.CutSuffix(signed, integrity.OutboardSidecar); !ok && !p.hasScope && tree && !strings.HasSuffix(t, "/") {
		// The outboard tree of a file goes with the file's signature: it
		// is the file's own hashes, and engine fetch asks for it by the
		// Link the file's response gave, with the same query.
		ok = hmac.Equal(mac(secret, StringToSign(p.kid, p.exp, p.ip, mode, t)), p.sig)
	}
	if !ok {
		return ErrBadSig
	}
	// The signature is the signer's: now what it says is checked.
	if now.Unix() > p.exp {
		return ErrExpired
	}
	if p.hasScope && (!strings.HasSuffix(p.scope, "/") || !config.NormalPath(p.scope) || !hasPrefix(clean, p.scope)) {
		return ErrScope
	}
	if p.ip != "" {
		pfx, err := config.ParsePrefix(p.ip)
		if err != nil || !pfx.Contains(client.Unmap()) {
			return ErrAddress
		}
	}
	return nil
}

// Redact returns target with the value of every sig parameter of its
// query replaced by "REDACTED", for logs: whoever reads a log must not
// be able to use the URLs in it. target is returned as is when it has
// none.
func Redact(target []byte) []byte {
	q := strings.IndexByte(string(target), '?')
	if q < 0 || !strings.Contains(string(target[q:]), ParamSig+"=") {
		return target
	}
	out := append(make([]byte, 0, len(target)), target[:q+1]...)
	rest := string(target[q+1:])
	for first := true; ; first = false {
		kv, more, found := strings.Cut(rest, "&")
		if !first {
			out = append(out, '&')
		}
		if k, _, _ := strings.Cut(kv, "="); k == ParamSig {
			out = append(out, ParamSig+"=REDACTED"...)
		} else {
			out = append(out, kv...)
		}
		if !found {
			return out
		}
		rest = more
	}
}

// SignatureQuery returns the signature parameters of a raw query, as
// sent and in their order, joined by "&": what a link to the file's
// outboard tree carries so that the tree is fetched with the file's
// signature. nil when there are none.
func SignatureQuery(query []byte) []byte {
	var out []byte
	q := string(query)
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		switch k, _, _ := strings.Cut(kv, "="); k {
		case ParamExpires, ParamKeyID, ParamScope, ParamIP, ParamSig:
			if out != nil {
				out = append(out, '&')
			}
			out = append(out, kv...)
		}
	}
	return out
}
