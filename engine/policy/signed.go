package policy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// Keys are the signing secrets by key id, and the signatures they
// verified.
type Keys struct {
	m map[string]*key
	// seen holds signatures found good, with what each signed: a
	// request that repeats every signed value of one (a client asking
	// range after range of one URL) needs no HMAC. A direct-mapped
	// table, a slot chosen by the signature's first bytes: a lookup takes
	// no lock and allocates nothing, and a newer signature simply takes
	// an older one's slot.
	seen [seenSlots]atomic.Pointer[seenSig]
}

// seenSig is a good signature, as sent (its one spelling), and what it
// signed.
type seenSig struct {
	raw, kid, ip, mode, signed string
	exp                        int64
}

const seenSlots = 4096

// seenSlot chooses a signature's slot by its first characters (the
// signature is an HMAC: they are as good as random).
func seenSlot(raw []byte) int {
	return int(uint32(raw[0])|uint32(raw[1])<<8|uint32(raw[2])<<16) % seenSlots
}

func (k *Keys) lookupSeen(p *sigParams, mode string, signed []byte) bool {
	s := k.seen[seenSlot(p.rawSig)].Load()
	return s != nil && s.raw == string(p.rawSig) && s.exp == p.exp && s.mode == mode && s.kid == string(p.kid) &&
		s.ip == string(p.ip) && s.signed == string(signed)
}

func (k *Keys) remember(p *sigParams, mode string, signed []byte) {
	k.seen[seenSlot(p.rawSig)].Store(&seenSig{raw: string(p.rawSig), kid: string(p.kid), ip: string(p.ip), mode: mode, signed: string(signed), exp: p.exp})
}

// key is one secret, with keyed HMAC states to reuse: a state's Reset
// goes back to the secret's pads without hashing the secret again.
type key struct {
	secret []byte
	macs   sync.Pool // *macState
}

type macState struct {
	h   hash.Hash
	buf []byte // the string to sign, reused
	out []byte // the sum, reused (a stack array handed to h would escape)
}

func newKey(secret []byte) *key {
	k := &key{secret: secret}
	k.macs.New = func() any {
		return &macState{h: hmac.New(sha256.New, k.secret), buf: make([]byte, 0, 256), out: make([]byte, 0, sha256.Size)}
	}
	return k
}

// sum returns HMAC-SHA-256 of the string to sign of (kid, exp, ip,
// mode, path).
func (k *key) sum(kid []byte, exp int64, ip []byte, mode string, path []byte) (out [sha256.Size]byte) {
	m := k.macs.Get().(*macState)
	b := append(m.buf[:0], SigAlgorithm+"\n"...)
	b = append(append(b, kid...), '\n')
	b = append(strconv.AppendInt(b, exp, 10), '\n')
	b = append(append(b, ip...), '\n')
	b = append(append(b, mode...), '\n')
	b = append(b, path...)
	m.h.Reset()
	m.h.Write(b)
	m.out = m.h.Sum(m.out[:0])
	copy(out[:], m.out)
	if cap(b) <= 4096 {
		m.buf = b
	}
	k.macs.Put(m)
	return out
}

// LoadKeys reads every key file of [signing] keys (id -> path).
func LoadKeys(files map[string]string) (*Keys, error) {
	k := &Keys{m: map[string]*key{}}
	for id, name := range files {
		b, err := config.ReadSecret(name)
		if err != nil {
			return nil, fmt.Errorf("signing key %s: %w", id, err)
		}
		k.m[id] = newKey(b)
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
	sk, ok := k.m[r.KeyID]
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
	sig := sk.sum([]byte(r.KeyID), exp, []byte(ip), mode, []byte(r.Path))
	q := ParamExpires + "=" + strconv.FormatInt(exp, 10) + "&" + ParamKeyID + "=" + url.QueryEscape(r.KeyID)
	if r.Prefix {
		q += "&" + ParamScope + "=" + escapeScope(r.Path)
	}
	if ip != "" {
		q += "&" + ParamIP + "=" + url.QueryEscape(ip)
	}
	return q + "&" + ParamSig + "=" + base64.RawURLEncoding.EncodeToString(sig[:]), nil
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

// sigParams are a request's signature parameters, as slices of the
// query (decoded copies only when a value is percent-encoded).
type sigParams struct {
	exp      int64
	kid, ip  []byte
	scope    []byte
	sig      [sha256.Size]byte // decoded from rawSig by decodeSig
	rawSig   []byte            // as sent: sigLen characters
	hasScope bool
	seen     uint8
}

// parseSig reads the signature parameters of a raw query. A parameter
// given twice makes it malformed: a signer and a server must never read
// two URLs out of one.
func parseSig(query []byte) (sigParams, error) {
	var p sigParams
	q := query
	for len(q) > 0 {
		var k, v []byte
		_, k, v, q = nextParam(q)
		var bit uint8
		switch string(k) {
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
		if (bit == 2 || bit == 4 || bit == 8) && (bytes.IndexByte(v, '%') >= 0 || bytes.IndexByte(v, '+') >= 0) {
			// kid, scope and ip may come percent-encoded; exp and sig have
			// one spelling only (decimal, base64url): a grant is one URL,
			// not many that a list or a cache key could tell apart.
			u, err := url.QueryUnescape(string(v))
			if err != nil {
				return p, ErrMalformed
			}
			v = []byte(u)
		}
		switch bit {
		case 1:
			n, ok := decimal(v)
			if !ok {
				return p, ErrMalformed
			}
			p.exp = n
		case 2:
			p.kid = v
		case 4:
			p.scope, p.hasScope = v, true
		case 8:
			p.ip = v
		case 16:
			if len(v) != sigLen {
				return p, ErrMalformed
			}
			p.rawSig = v // decoded only when it is not one seen before (decodeSig)
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

// sigLen is the length of a signature in base64url without padding.
const sigLen = (sha256.Size*8 + 5) / 6

// base64URL reports whether v holds only base64url's alphabet.
func base64URL(v []byte) bool {
	for _, c := range v {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// decodeSig decodes the signature's one spelling (base64url of exactly
// sigLen characters, strict) into p.sig.
func decodeSig(p *sigParams) error {
	if !base64URL(p.rawSig) {
		return ErrMalformed // checked first: the decoder skips line breaks
	}
	if n, err := base64.RawURLEncoding.Strict().Decode(p.sig[:], p.rawSig); err != nil || n != sha256.Size {
		return ErrMalformed
	}
	return nil
}

// decimal reads a non-negative decimal number of at most 18 digits,
// without leading zeros.
func decimal(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 || len(v) > 1 && v[0] == '0' {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
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
	sk, ok := k.m[string(p.kid)]
	if !ok {
		return ErrUnknownKey
	}
	mode, signed := "path", clean
	if p.hasScope {
		mode, signed = "prefix", p.scope
	}
	if !k.lookupSeen(&p, mode, signed) {
		if err := decodeSig(&p); err != nil {
			return err
		}
		want := sk.sum(p.kid, p.exp, p.ip, mode, signed)
		ok = hmac.Equal(want[:], p.sig[:])
		if t, tree := bytes.CutSuffix(signed, []byte(integrity.OutboardSidecar)); !ok && !p.hasScope && tree && !bytes.HasSuffix(t, []byte("/")) {
			// The outboard tree of a file goes with the file's
			// signature: it is the file's own hashes, and engine fetch
			// asks for it by the Link the file's response gave, with
			// the same query. (Not remembered: it is asked once.)
			want = sk.sum(p.kid, p.exp, p.ip, mode, t)
			ok = hmac.Equal(want[:], p.sig[:])
		} else if ok {
			k.remember(&p, mode, signed)
		}
		if !ok {
			return ErrBadSig
		}
	}
	// The signature is the signer's: now what it says is checked.
	if now.Unix() > p.exp {
		return ErrExpired
	}
	if p.hasScope && (!bytes.HasSuffix(p.scope, []byte("/")) || !config.NormalPath(string(p.scope)) || !hasPrefix(clean, string(p.scope))) {
		return ErrScope
	}
	if len(p.ip) > 0 {
		pfx, err := config.ParsePrefix(string(p.ip))
		if err != nil || !pfx.Contains(client.Unmap()) {
			return ErrAddress
		}
	}
	return nil
}

// Redact returns target with the value of every sig parameter of its
// query replaced by "REDACTED", for logs: whoever reads a log must not
// be able to use the URLs in it. A parameter is taken for sig however it
// is spelled (any case, percent-encoded, after "&" or ";"), so that a
// signature a client sent malformed is not logged whole either. target
// is returned as is when it has none.
func Redact(target []byte) []byte {
	q := bytes.IndexByte(target, '?')
	if q < 0 || !mayHoldSig(target[q:]) {
		return target
	}
	out := append(make([]byte, 0, len(target)), target[:q+1]...)
	rest := target[q+1:]
	for len(rest) > 0 {
		end := bytes.IndexAny(rest, "&;")
		param := rest
		if end >= 0 {
			param = rest[:end]
		}
		if isSigParam(param) {
			out = append(out, ParamSig+"=REDACTED"...)
		} else {
			out = append(out, param...)
		}
		if end < 0 {
			break
		}
		out = append(out, rest[end])
		rest = rest[end+1:]
	}
	return out
}

// mayHoldSig reports whether a query could hold a sig parameter in any
// spelling: "sig" in any case, or a percent-encoding.
func mayHoldSig(q []byte) bool {
	return bytes.IndexByte(q, '%') >= 0 || bytes.Contains(bytes.ToLower(q), []byte(ParamSig))
}

// isSigParam reports whether one query parameter ("name=value") is sig,
// its name decoded and in any case.
func isSigParam(param []byte) bool {
	name := param
	if i := bytes.IndexByte(param, '='); i >= 0 {
		name = param[:i]
	}
	n := string(name)
	if bytes.IndexByte(name, '%') >= 0 {
		if u, err := url.QueryUnescape(n); err == nil {
			n = u
		}
	}
	n = strings.ToLower(n)
	return n == ParamSig || strings.HasPrefix(n, ParamSig+"=")
}

// onlySigParams reports whether every parameter of a raw query is a
// signature parameter.
func onlySigParams(q []byte) bool {
	for len(q) > 0 {
		var k []byte
		_, k, _, q = nextParam(q)
		if !sigName(k) {
			return false
		}
	}
	return true
}

// nextParam splits the first parameter off a raw query: the parameter
// ("k=v"), its name and value, and the rest after its "&".
func nextParam(q []byte) (kv, k, v, rest []byte) {
	kv = q
	if i := bytes.IndexByte(q, '&'); i >= 0 {
		kv, rest = q[:i], q[i+1:]
	}
	k = kv
	if i := bytes.IndexByte(kv, '='); i >= 0 {
		k, v = kv[:i], kv[i+1:]
	}
	return kv, k, v, rest
}

// sigName reports whether a parameter name is one of a signature's.
func sigName(k []byte) bool {
	switch string(k) {
	case ParamExpires, ParamKeyID, ParamScope, ParamIP, ParamSig:
		return true
	}
	return false
}

// SignatureQuery returns the signature parameters of a raw query, as
// sent and in their order, joined by "&": what a link to the file's
// outboard tree carries so that the tree is fetched with the file's
// signature. nil when there are none.
func SignatureQuery(query []byte) []byte {
	var out []byte
	for q := query; len(q) > 0; {
		var kv, k []byte
		kv, k, _, q = nextParam(q)
		if sigName(k) {
			if out == nil {
				out = make([]byte, 0, len(query))
			} else {
				out = append(out, '&')
			}
			out = append(out, kv...)
		}
	}
	return out
}
