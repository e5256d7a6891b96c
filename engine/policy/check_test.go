package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"

	"github.com/mediaship/engine/engine/config"
)

type hdrs map[string]string

func (h hdrs) Values(name string, dst [][]byte) [][]byte {
	if v := h.Get(name); v != nil {
		dst = append(dst, v)
	}
	return dst
}

func (h hdrs) Get(name string) []byte {
	v, ok := h[name]
	if !ok {
		return nil
	}
	return []byte(v)
}

// twoAuth is a request with two Authorization fields.
type twoAuth [2]string

func (a twoAuth) Get(name string) []byte {
	if name == "authorization" {
		return []byte(a[0])
	}
	return nil
}

func (a twoAuth) Values(name string, dst [][]byte) [][]byte {
	if name == "authorization" {
		dst = append(dst, []byte(a[0]), []byte(a[1]))
	}
	return dst
}

func writeCreds(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func argon2Hash(pass string) string {
	salt := []byte("saltsaltsalt")
	sum := argon2.IDKey([]byte(pass), salt, 1, 64, 1, 32)
	return fmt.Sprintf("$argon2id$v=19$m=64,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(sum))
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestCredentialsFiles(t *testing.T) {
	bc, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	c, err := LoadCredentials(writeCreds(t, "# users\nalice:"+string(bc)+"\n\nbob:"+argon2Hash("hunter2")+"\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, pass string
		want       bool
	}{{"alice", "s3cret", true}, {"alice", "S3cret", false}, {"bob", "hunter2", true}, {"bob", "s3cret", false}, {"carol", "s3cret", false}} {
		if got := c.Cached([]byte(tc.user), []byte(tc.pass), time.Now()); got != Unknown && tc.user != "carol" {
			t.Fatalf("%s before Verify: %v", tc.user, got)
		}
		if got := c.Verify([]byte(tc.user), []byte(tc.pass)); got != tc.want {
			t.Errorf("Verify(%s, %s) = %v", tc.user, tc.pass, got)
		}
		want := Bad
		if tc.want {
			want = Good
		}
		if got := c.Cached([]byte(tc.user), []byte(tc.pass), time.Now()); got != want {
			t.Errorf("Cached(%s, %s) = %v after Verify, want %v", tc.user, tc.pass, got, want)
		}
	}
	if got := c.Cached([]byte("alice"), []byte("S3cret"), time.Now().Add(knownBadFor+time.Second)); got != Unknown {
		t.Errorf("a wrong password is remembered past knownBadFor: %v", got)
	}

	sum := sha256.Sum256([]byte("tok-123"))
	b, err := LoadCredentials(writeCreds(t, "ci:sha256:"+hex.EncodeToString(sum[:])+"\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	if b.Bearer([]byte("tok-123")) != "ci" || b.Bearer([]byte("tok-124")) != "" || b.Bearer(nil) != "" {
		t.Fatal("bearer token lookup")
	}

	for text, want := range map[string]string{
		"alice:plaintext\n":                             "creds:1: user alice: the hash is neither bcrypt",
		"\n\nalice:$2y$10$short\n":                      "creds:3: user alice: bcrypt hash unreadable",
		"alice:" + string(bc) + "\nalice:" + string(bc): "creds:2: user alice is listed twice",
		"nocolon\n": "creds:1: expected \"user:HASH\"",
		"bob:$argon2id$v=19$m=9999999,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA\n": "argon2id parameters out of range",
	} {
		if _, err := LoadCredentials(writeCreds(t, text), true); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadCredentials(%q) = %v, want %q", text, err, want)
		}
	}
	if _, err := LoadCredentials(writeCreds(t, "ci:sha256:abcd\n"), false); err == nil || !strings.Contains(err.Error(), "creds:1: expected \"name:sha256:HEX\"") {
		t.Errorf("short bearer hash: %v", err)
	}
}

func TestCheck(t *testing.T) {
	bc, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	sum := sha256.Sum256([]byte("tok"))
	keyFile := filepath.Join(t.TempDir(), "k1")
	os.WriteFile(keyFile, []byte(strings.Repeat("k", 32)), 0o600)
	cfg := func(p config.Policy) config.PathPolicy {
		p.AllowNets, p.DenyNets = nil, nil
		for _, a := range p.Allow {
			n, _ := config.ParsePrefix(a)
			p.AllowNets = append(p.AllowNets, n)
		}
		for _, a := range p.Deny {
			n, _ := config.ParsePrefix(a)
			p.DenyNets = append(p.DenyNets, n)
		}
		if p.Auth == "" {
			p.Auth = "none"
		}
		return config.PathPolicy{Policy: p}
	}
	paths := []config.PathPolicy{cfg(config.Policy{Auth: "basic", Credentials: writeCreds(t, "u:"+string(bc)+"\n")}),
		cfg(config.Policy{Auth: "bearer", Credentials: writeCreds(t, "t:sha256:"+hex.EncodeToString(sum[:])+"\n")}),
		cfg(config.Policy{Auth: "signed"}),
		cfg(config.Policy{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.9.0.0/16"}, CORSOrigins: []string{"https://app.test"}, CORSMethods: []string{"GET", "HEAD"}})}
	for i, pre := range []string{"/basic/", "/bearer/", "/signed/", "/net/"} {
		paths[i].Prefix = pre
	}
	tab := NewTable(paths, "", "test")
	s, err := NewSecrets(map[string]string{"k1": keyFile}, tab.Paths())
	if err != nil {
		t.Fatal(err)
	}
	signed, _ := s.Keys().Sign(SignRequest{KeyID: "k1", Path: "/signed/", Prefix: true, Expires: time.Now().Add(time.Minute)})
	in := netip.MustParseAddr("10.1.2.3")
	for _, tc := range []struct {
		name, method, path, query string
		client                    netip.Addr
		h                         Headers
		status                    int
		reason                    string
		slow                      bool
	}{
		{"basic, none", "GET", "/basic/x", "", in, hdrs{}, 401, ReasonPassword, false},
		{"basic, unknown user (checked as long as a known one)", "GET", "/basic/x", "", in, hdrs{"authorization": basicAuth("v", "pw")}, 0, "", true},
		{"basic, first time", "GET", "/basic/x", "", in, hdrs{"authorization": basicAuth("u", "pw")}, 0, "", true},
		{"bearer, none", "GET", "/bearer/x", "", in, hdrs{}, 401, ReasonToken, false},
		{"bearer, two Authorization fields", "GET", "/bearer/x", "", in, twoAuth{"bearer tok", "bearer other"}, 400, ReasonAmbiguous, false},
		{"bearer, wrong", "GET", "/bearer/x", "", in, hdrs{"authorization": "Bearer tok2"}, 401, ReasonToken, false},
		{"bearer, right", "GET", "/bearer/x", "", in, hdrs{"authorization": "bearer tok"}, 0, "", false},
		{"signed, none", "GET", "/signed/x", "", in, hdrs{}, 403, ReasonUnsigned, false},
		{"signed, right", "GET", "/signed/x", signed, in, hdrs{}, 0, "", false},
		{"signed, tampered", "GET", "/signed/x", strings.Replace(signed, "exp=", "exp=1", 1), in, hdrs{}, 403, ReasonSignature, false},
		{"net, outside", "GET", "/net/x", "", netip.MustParseAddr("192.0.2.1"), hdrs{}, 403, ReasonAddress, false},
		{"net, denied inside", "GET", "/net/x", "", netip.MustParseAddr("10.9.1.1"), hdrs{}, 403, ReasonAddress, false},
		{"net, mapped v6", "GET", "/net/x", "", netip.MustParseAddr("::ffff:10.1.1.1"), hdrs{}, 0, "", false},
		{"preflight", "OPTIONS", "/net/x", "", in, hdrs{"origin": "https://app.test", "access-control-request-method": "GET", "access-control-request-headers": "Range, if-none-match"}, 204, "", false},
		{"preflight, other origin", "OPTIONS", "/net/x", "", in, hdrs{"origin": "https://evil.test", "access-control-request-method": "GET"}, 403, ReasonPreflight, false},
		{"preflight, PUT", "OPTIONS", "/net/x", "", in, hdrs{"origin": "https://app.test", "access-control-request-method": "PUT"}, 403, ReasonPreflight, false},
		{"preflight, a field not allowed", "OPTIONS", "/net/x", "", in, hdrs{"origin": "https://app.test", "access-control-request-method": "GET", "access-control-request-headers": "x-secret"}, 403, ReasonPreflight, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tab.Match([]byte(tc.path))
			v := s.Check(p, &Request{Method: []byte(tc.method), Clean: []byte(tc.path), Query: []byte(tc.query), Client: tc.client, Header: tc.h, Now: time.Now()})
			if v.Status != tc.status || v.Reason != tc.reason || (v.Slow != nil) != tc.slow {
				t.Fatalf("Check = %+v, want status %d reason %q slow %v", v, tc.status, tc.reason, tc.slow)
			}
			if v.Status == 401 && !strings.Contains(v.Challenge, `realm="test"`) {
				t.Fatalf("401 without a challenge: %+v", v)
			}
			if v.Slow != nil {
				v.Slow()
				v = s.Check(p, &Request{Method: []byte(tc.method), Clean: []byte(tc.path), Query: []byte(tc.query), Client: tc.client, Header: tc.h, Now: time.Now()})
				want := 0
				if strings.Contains(tc.name, "unknown user") {
					want = 401
				}
				if v.Status != want || v.Slow != nil {
					t.Fatalf("after the hash: %+v, want %d", v, want)
				}
			}
		})
	}
	// Reload swaps the credentials file's users in.
	bc2, _ := bcrypt.GenerateFromPassword([]byte("pw2"), bcrypt.MinCost)
	os.WriteFile(paths[0].Credentials, []byte("u:"+string(bc2)+"\n"), 0o600)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	p := tab.Match([]byte("/basic/x"))
	if v := s.Check(p, &Request{Method: []byte("GET"), Clean: []byte("/basic/x"), Client: in, Header: hdrs{"authorization": basicAuth("u", "pw")}, Now: time.Now()}); v.Slow == nil {
		t.Fatalf("the old password is still known after a reload: %+v", v)
	}
	// A reload that fails keeps what is in use.
	os.WriteFile(paths[0].Credentials, []byte("u:plain\n"), 0o600)
	if err := s.Reload(); err == nil {
		t.Fatal("a broken credentials file reloaded")
	}
}

// TestAdmit: a client's password checks waiting are bounded (an IPv6
// client by its /64), and so are everyone's; a release frees a slot.
func TestAdmit(t *testing.T) {
	bc, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	c, err := LoadCredentials(writeCreds(t, "u:"+string(bc)+"\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for i := 0; i < pendingPerClient; i++ {
		if !c.Admit(a) {
			t.Fatalf("slot %d refused", i)
		}
	}
	if c.Admit(a) {
		t.Fatal("a client got more than its slots")
	}
	if !c.Admit(b) {
		t.Fatal("another client was refused for the first one's checks")
	}
	c.Release(a)
	if !c.Admit(a) {
		t.Fatal("a released slot was not given back")
	}
	v6a, v6b := netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("2001:db8:1:2:ffff::9")
	for i := 0; i < pendingPerClient; i++ {
		c.Admit(v6a)
	}
	if c.Admit(v6b) {
		t.Fatal("another address of the same /64 got slots of its own")
	}
	if !c.Admit(netip.MustParseAddr("2001:db8:1:3::1")) {
		t.Fatal("another /64 was refused")
	}
}

// FuzzCredentials: no credentials file makes the reader panic.
func FuzzCredentials(f *testing.F) {
	f.Add([]byte("alice:$2y$04$abcdefghijklmnopqrstuu5f8yd9vSQ4gSh8q7sPRjyqzPK7jPnBG\n"), true)
	f.Add([]byte("bob:$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA\n"), true)
	f.Add([]byte("ci:sha256:00\n# x\n"), false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, basic bool) {
		p := filepath.Join(dir, "c")
		os.WriteFile(p, data, 0o600)
		c, err := LoadCredentials(p, basic)
		if err == nil && basic {
			c.Cached([]byte("alice"), []byte("x"), time.Now())
		}
		ParseBasic(data)
		ParseBearer(data)
	})
}
