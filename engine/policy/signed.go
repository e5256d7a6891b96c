package policy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
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
	// seen holds queries found good, with what each judges: a request
	// that repeats one (a client asking range after range of one URL)
	// is judged without parsing its query or computing an HMAC. A
	// direct-mapped table, a slot chosen by a seeded hash of the query:
	// a lookup takes no lock and allocates nothing, and a newer query
	// simply takes an older one's slot.
	seen [seenSlots]atomic.Pointer[seenSig]
	seed maphash.Seed
}

// seenSig is a query whose signature was found good, as sent (a query
// is parsed one way only, so the same bytes say the same again), with
// what it says, read once: the path it signed, or its scope, its expiry
// and its address rule.
type seenSig struct {
	query  string
	signed string // path mode: the path signed; prefix mode: ""
	p      grant
}

// grant is what a good signature allows, apart from its path: until
// exp, under scope when hasScope, from addresses in ip when hasIP.
type grant struct {
	exp      int64
	hasScope bool
	scopeOK  bool // the scope is a normal path ending in "/"
	scope    string
	hasIP    bool
	ipOK     bool // ip parsed
	ip       netip.Prefix
	// sigOnly: the query is the signature's parameters alone (as engine
	// sign writes it), what a Link to the file's tree carries as it is.
	sigOnly bool
}

const (
	seenSlots = 4096
	// seenMax bounds the bytes an entry keeps (its query and path): the
	// table holds at most seenSlots times this. A signed query longer
	// than it is judged in full every time.
	seenMax = 1024
)

func (k *Keys) seenSlot(query []byte) int {
	return int(maphash.Bytes(k.seed, query) % seenSlots)
}

// lookupSeen returns what a query seen before grants on path clean, or
// nil when the query is not one of the table's (or signed another path).
func (k *Keys) lookupSeen(query, clean []byte) *grant {
	s := k.seen[k.seenSlot(query)].Load()
	if s == nil || s.query != string(query) || (!s.p.hasScope && s.signed != string(clean)) {
		return nil
	}
	return &s.p
}

func (k *Keys) remember(query, signed []byte, g grant) {
	if len(query)+len(signed) > seenMax {
		return
	}
	s := &seenSig{query: string(query), p: g}
	if !g.hasScope {
		s.signed = string(signed)
	}
	k.seen[k.seenSlot(query)].Store(s)
}

// newGrant reads what parameters p, parsed from query, allow.
func newGrant(p *sigParams, query []byte) grant {
	g := grant{exp: p.exp, hasScope: p.hasScope, hasIP: len(p.ip) > 0, sigOnly: onlySigParams(query)}
	if g.hasScope {
		g.scope = string(p.scope)
		g.scopeOK = strings.HasSuffix(g.scope, "/") && config.NormalPath(g.scope)
	}
	if g.hasIP {
		pfx, err := config.ParsePrefix(string(p.ip))
		g.ip, g.ipOK = pfx, err == nil
	}
	return g
}

// judge checks what a good signature says against the request: its
// expiry, its scope and its address rule.
func (g *grant) judge(clean []byte, client netip.Addr, now time.Time) error {
	if now.Unix() > g.exp {
		return ErrExpired
	}
	if g.hasScope && (!g.scopeOK || !hasPrefix(clean, g.scope)) {
		return ErrScope
	}
	if g.hasIP && (!g.ipOK || !g.ip.Contains(client.Unmap())) {
		return ErrAddress
	}
	return nil
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
	k := &Keys{m: map[string]*key{}, seed: maphash.MakeSeed()}
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
	_, err := k.verify(query, clean, client, now)
	return err
}

// verify is Verify, and reports whether the query is the signature's
// parameters alone.
func (k *Keys) verify(query, clean []byte, client netip.Addr, now time.Time) (sigOnly bool, err error) {
	if k == nil {
		return false, ErrUnknownKey
	}
	if g := k.lookupSeen(query, clean); g != nil {
		return g.sigOnly, g.judge(clean, client, now)
	}
	p, err := parseSig(query)
	if err != nil {
		return false, err
	}
	sk, ok := k.m[string(p.kid)]
	if !ok {
		return false, ErrUnknownKey
	}
	mode, signed := "path", clean
	if p.hasScope {
		mode, signed = "prefix", p.scope
	}
	if err := decodeSig(&p); err != nil {
		return false, err
	}
	want := sk.sum(p.kid, p.exp, p.ip, mode, signed)
	ok = hmac.Equal(want[:], p.sig[:])
	g := newGrant(&p, query)
	if t, tree := bytes.CutSuffix(signed, []byte(integrity.OutboardSidecar)); !ok && !p.hasScope && tree && !bytes.HasSuffix(t, []byte("/")) {
		// The outboard tree of a file goes with the file's signature: it
		// is the file's own hashes, and engine fetch asks for it by the
		// Link the file's response gave, with the same query. (Not
		// remembered: it is asked once.)
		want = sk.sum(p.kid, p.exp, p.ip, mode, t)
		ok = hmac.Equal(want[:], p.sig[:])
	} else if ok {
		k.remember(query, signed, g)
	}
	if !ok {
		return false, ErrBadSig
	}
	// The signature is the signer's: now what it says is checked.
	return g.sigOnly, g.judge(clean, client, now)
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
