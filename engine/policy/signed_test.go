package policy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/config"
)

var testNow = time.Unix(1_800_000_000, 0)

func testKeys(t testing.TB, ids ...string) *Keys {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for _, id := range ids {
		p := filepath.Join(dir, id)
		if err := os.WriteFile(p, []byte(strings.Repeat(id, 40)[:40]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		files[id] = p
	}
	k, err := LoadKeys(files)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t *testing.T, k *Keys, r SignRequest) []byte {
	t.Helper()
	q, err := k.Sign(r)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(q)
}

// TestStringToSignVector pins the format a signer in another language
// implements from the README: the key, the string and the signature of
// its example.
func TestStringToSignVector(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	s := StringToSign("k1", 1767225600, "", "prefix", "/gated/llama/")
	if want := "ENGINE-HMAC-SHA256\nk1\n1767225600\n\nprefix\n/gated/llama/"; s != want {
		t.Fatalf("string to sign %q, want %q", s, want)
	}
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(s))
	got := base64.RawURLEncoding.EncodeToString(h.Sum(nil))
	// The README's example signature (openssl dgst -sha256 -hmac gives the
	// same): if this changes, so must the README.
	const readme = "vIw49cMwFDDIr1n7KpGfPIhVhoh17KJz87STNGYa3go"
	if got != readme {
		t.Fatalf("signature %s, want the README's %s", got, readme)
	}
	k := &Keys{m: map[string]*key{"k1": newKey(secret)}}
	q, err := k.Sign(SignRequest{KeyID: "k1", Path: "/gated/llama/", Prefix: true, Expires: time.Unix(1767225600, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := "exp=1767225600&kid=k1&scope=/gated/llama/&sig=" + readme; q != want {
		t.Fatalf("query %s, want %s", q, want)
	}
}

func TestVerify(t *testing.T) {
	k := testKeys(t, "k1", "k2")
	client := netip.MustParseAddr("192.0.2.7")
	exp := testNow.Add(time.Hour)
	exact := sign(t, k, SignRequest{KeyID: "k1", Path: "/gated/llama/a.bin", Expires: exp})
	prefix := sign(t, k, SignRequest{KeyID: "k2", Path: "/gated/llama/", Prefix: true, Expires: exp})
	bound := sign(t, k, SignRequest{KeyID: "k1", Path: "/gated/llama/a.bin", Expires: exp, IP: netip.MustParsePrefix("192.0.2.0/24")})
	boundOther := sign(t, k, SignRequest{KeyID: "k1", Path: "/gated/llama/a.bin", Expires: exp, IP: netip.MustParsePrefix("198.51.100.1/32")})
	edge := sign(t, k, SignRequest{KeyID: "k1", Path: "/gated/llama/a.bin", Expires: testNow})
	tamper := func(q []byte, from, to string) []byte { return []byte(strings.Replace(string(q), from, to, 1)) }
	for _, tc := range []struct {
		name  string
		query []byte
		path  string
		now   time.Time
		want  error
	}{
		{"exact", exact, "/gated/llama/a.bin", testNow, nil},
		{"exact, other path", exact, "/gated/llama/b.bin", testNow, ErrBadSig},
		{"exact, its tree", exact, "/gated/llama/a.bin.obao", testNow, nil},
		{"exact, another file's tree", exact, "/gated/llama/b.bin.obao", testNow, ErrBadSig},
		{"exact, a directory's", exact, "/gated/llama/a.bin/", testNow, ErrBadSig},
		{"prefix, a shard", prefix, "/gated/llama/shard-00001.safetensors", testNow, nil},
		{"prefix, deeper", prefix, "/gated/llama/sub/x", testNow, nil},
		{"prefix, the directory", prefix, "/gated/llama/", testNow, nil},
		{"prefix, the directory without its slash", prefix, "/gated/llama", testNow, nil},
		{"prefix, a sibling with the same start", prefix, "/gated/llama2/x", testNow, ErrScope},
		{"prefix, outside", prefix, "/gated/other.bin", testNow, ErrScope},
		{"prefix, scope widened", tamper(prefix, "scope=/gated/llama/", "scope=/gated/"), "/gated/other.bin", testNow, ErrBadSig},
		{"prefix read as exact", tamper(prefix, "&scope=/gated/llama/", ""), "/gated/llama/", testNow, ErrBadSig},
		{"exact read as prefix", tamper(exact, "&sig=", "&scope=/gated/llama/a.bin&sig="), "/gated/llama/a.bin", testNow, ErrBadSig},
		{"expires at the second", edge, "/gated/llama/a.bin", testNow, nil},
		{"expired a second later", edge, "/gated/llama/a.bin", testNow.Add(time.Second), ErrExpired},
		{"expiry moved", tamper(exact, "exp=", "exp=9"), "/gated/llama/a.bin", testNow, ErrBadSig},
		{"other key's id", tamper(exact, "kid=k1", "kid=k2"), "/gated/llama/a.bin", testNow, ErrBadSig},
		{"unknown key", tamper(exact, "kid=k1", "kid=k9"), "/gated/llama/a.bin", testNow, ErrUnknownKey},
		{"bound, in the prefix", bound, "/gated/llama/a.bin", testNow, nil},
		{"bound elsewhere", boundOther, "/gated/llama/a.bin", testNow, ErrAddress},
		{"binding dropped", tamper(bound, "&ip=192.0.2.0%2F24", ""), "/gated/llama/a.bin", testNow, ErrBadSig},
		{"no signature", []byte("x=1"), "/gated/llama/a.bin", testNow, ErrUnsigned},
		{"no query", nil, "/gated/llama/a.bin", testNow, ErrUnsigned},
		{"sig missing", tamper(exact, "&sig=", "&zig="), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"sig twice", append(append([]byte{}, exact...), "&sig=AAAA"...), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"exp twice", append([]byte("exp=1&"), exact...), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"sig not base64url", tamper(exact, "sig=", "sig=%%"), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"exp negative", tamper(exact, "exp=", "exp=-"), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"exp with a leading zero", tamper(exact, "exp=", "exp=0"), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"exp with a plus", tamper(exact, "exp=", "exp=%2B"), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"sig with a line break", tamper(exact, "sig=", "sig=%0A"), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"sig percent-encoded", tamper(exact, "sig=", "sig=%41"), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"sig's last character's spare bits", lastBits(exact), "/gated/llama/a.bin", testNow, ErrMalformed},
		{"other parameters are not signed", append([]byte("download=1&"), exact...), "/gated/llama/a.bin", testNow, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := k.Verify(tc.query, []byte(tc.path), client, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify(%s, %s) = %v, want %v", tc.query, tc.path, err, tc.want)
			}
		})
	}
	// Rotation: a URL signed with k1 still passes once k2 is added, and
	// fails once k1 is gone.
	rotated := testKeys(t, "k2")
	if err := rotated.Verify(exact, []byte("/gated/llama/a.bin"), client, testNow); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("k1 retired: %v", err)
	}
}

// lastBits changes the two bits of a signature's last character that
// carry no data: the same bytes decoded loosely, another URL.
func lastBits(q []byte) []byte {
	out := append([]byte(nil), q...)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := len(out) - 1
	out[i] = alphabet[strings.IndexByte(alphabet, out[i])^1]
	return out
}

func TestSignRefuses(t *testing.T) {
	k := testKeys(t, "k1")
	exp := testNow.Add(time.Hour)
	for _, r := range []SignRequest{
		{KeyID: "k2", Path: "/a", Expires: exp},
		{KeyID: "k1", Path: "a", Expires: exp},
		{KeyID: "k1", Path: "/a/../b", Expires: exp},
		{KeyID: "k1", Path: "/a//b", Expires: exp},
		{KeyID: "k1", Path: "/a/%2e", Expires: exp},
		{KeyID: "k1", Path: "/a/./b", Expires: exp},
		{KeyID: "k1", Path: "/a/b", Prefix: true, Expires: exp},
	} {
		if q, err := k.Sign(r); err == nil {
			t.Errorf("Sign(%+v) = %s, want an error", r, q)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"/a?exp=1&kid=k&sig=SECRET":            "/a?exp=1&kid=k&sig=REDACTED",
		"/a?sig=S1&x=1&sig=S2":                 "/a?sig=REDACTED&x=1&sig=REDACTED",
		"/a?zsig=keep&x=sig=keep":              "/a?zsig=keep&x=sig=keep",
		"/a/sig=path?x=1":                      "/a/sig=path?x=1",
		"/a":                                   "/a",
		"https://h/a?exp=1&sig=SECRET#f":       "https://h/a?exp=1&sig=REDACTED",
		"/a?mode=source&file=/g/x&sig=S&exp=1": "/a?mode=source&file=/g/x&sig=REDACTED&exp=1",
		"/a?exp=1;kid=k;sig=SECRET":            "/a?exp=1;kid=k;sig=REDACTED",
		"/a?SIG=SECRET&Sig=S2":                 "/a?sig=REDACTED&sig=REDACTED",
		"/a?%73ig=SECRET":                      "/a?sig=REDACTED",
		"/a?sig%3dSECRET":                      "/a?sig=REDACTED",
		"/a?x=%41":                             "/a?x=%41",
	} {
		if got := string(Redact([]byte(in))); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSignatureQuery(t *testing.T) {
	got := string(SignatureQuery([]byte("download=1&exp=5&kid=k1&scope=/a/&sig=S&x=2")))
	if want := "exp=5&kid=k1&scope=/a/&sig=S"; got != want {
		t.Fatalf("SignatureQuery = %q, want %q", got, want)
	}
	r := &Resp{SigQuery: []byte("exp=5&sig=S")}
	if got := string(r.Link([]byte(`</a.bin.obao>; rel="blake3-outboard"`))); got != `</a.bin.obao?exp=5&sig=S>; rel="blake3-outboard"` {
		t.Fatalf("Link = %s", got)
	}
	if got := string(r.Link([]byte(`</a.bin.obao?v=1>; rel="blake3-outboard"`))); got != `</a.bin.obao?v=1>; rel="blake3-outboard"` {
		t.Fatalf("Link with a query of its own = %s", got)
	}
}

// TestCheckSigQuery: a good signature's Verdict carries its parameters
// alone for the tree's Link, whether the query holds others or not, on
// the first request and on those after it (the seen table).
func TestCheckSigQuery(t *testing.T) {
	k := testKeys(t, "k1")
	q := sign(t, k, SignRequest{KeyID: "k1", Path: "/gated/a.bin", Expires: testNow.Add(time.Hour)})
	tab := NewTable([]config.PathPolicy{{Prefix: "/gated/", Policy: config.Policy{Auth: "signed"}}}, "", "t")
	s := &Secrets{}
	s.keys.Store(k)
	path := []byte("/gated/a.bin")
	for _, tc := range []struct{ query, want string }{
		{string(q), string(q)},
		{"download=1&" + string(q), string(q)},
		{string(q) + "&x=%41", string(q)},
	} {
		for i := range 2 {
			r := &Request{Method: []byte("GET"), Clean: path, Query: []byte(tc.query), Client: netip.MustParseAddr("127.0.0.1"), Header: hdrs{}, Now: testNow}
			v := s.Check(tab.Match(path), r)
			if v.Status != 0 || string(v.SigQuery) != tc.want {
				t.Errorf("%q, request %d: status %d, SigQuery %q, want 0 and %q", tc.query, i+1, v.Status, v.SigQuery, tc.want)
			}
		}
	}
	r := &Request{Method: []byte("GET"), Clean: []byte("/gated/b.bin"), Query: q, Client: netip.MustParseAddr("127.0.0.1"), Header: hdrs{}, Now: testNow}
	if v := s.Check(tab.Match(r.Clean), r); v.Status != 403 || v.SigQuery != nil {
		t.Errorf("another path under the seen query: status %d, SigQuery %q, want 403 and none", v.Status, v.SigQuery)
	}
}

// FuzzVerify: any query and path either verify or are refused with a
// reason, never a panic, and the same reason when asked again; and a URL
// signed for a path verifies for it.
func FuzzVerify(f *testing.F) {
	k := testKeys(f, "k1")
	q, _ := k.Sign(SignRequest{KeyID: "k1", Path: "/gated/", Prefix: true, Expires: testNow.Add(time.Hour)})
	f.Add([]byte(q), []byte("/gated/a"))
	f.Add([]byte("exp=1&kid=k1&sig=AAAA&scope=%2F"), []byte("/"))
	f.Add([]byte("exp=99999999999999999999&kid=&sig="), []byte(""))
	f.Fuzz(func(t *testing.T, query, path []byte) {
		err := k.Verify(query, path, netip.MustParseAddr("127.0.0.1"), testNow)
		if err == nil && !strings.HasPrefix(string(path), "/gated") {
			t.Fatalf("%q passed for %q", query, path)
		}
		// Asked again (a good one now from the seen table): the same answer.
		if again := k.Verify(query, path, netip.MustParseAddr("127.0.0.1"), testNow); again != err {
			t.Fatalf("%q for %q: %v, then %v", query, path, err, again)
		}
		Redact(append([]byte("/x?"), query...))
		SignatureQuery(query)
	})
}

// BenchmarkCheckSigned: one signed request judged, as decide does it.
func BenchmarkCheckSigned(b *testing.B) {
	k := testKeys(b, "k1")
	q := sign(&testing.T{}, k, SignRequest{KeyID: "k1", Path: "/gated/1k.bin", Expires: testNow.Add(time.Hour)})
	tab := NewTable([]config.PathPolicy{{Prefix: "/gated/", Policy: config.Policy{Auth: "signed", CacheControl: "private, max-age=3600",
		SetHeaders: map[string]string{"X-Frame-Options": "DENY"}}}}, "", "t")
	s := &Secrets{}
	s.keys.Store(k)
	h := hdrs{}
	path, method, client := []byte("/gated/1k.bin"), []byte("GET"), netip.MustParseAddr("127.0.0.1")
	r := &Request{Method: method, Clean: path, Query: q, Client: client, Header: h, Now: testNow}
	b.ReportAllocs()
	for b.Loop() {
		p := tab.Match(path)
		v := s.Check(p, r)
		if v.Status != 0 {
			b.Fatal(v)
		}
	}
}
