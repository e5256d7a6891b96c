package policy

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/config"
)

// TestForward: the endpoint is asked with the request's credentials and
// where it goes; its answers pass, refuse, redirect or fail closed, and
// are kept for the cache's time per credential.
func TestForward(t *testing.T) {
	var asked atomic.Int32
	var last atomic.Pointer[http.Header] // the handler's goroutine writes it
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		h := r.Header.Clone()
		last.Store(&h)
		switch r.Header.Get("Authorization") {
		case "Bearer good":
			w.WriteHeader(204)
		case "Bearer login":
			http.Redirect(w, r, "https://login.test/?next="+r.Header.Get("X-Forwarded-Uri"), 302)
		case "Bearer banned":
			w.WriteHeader(403)
		case "Bearer broken":
			w.WriteHeader(500)
		case "Bearer slow":
			<-r.Context().Done() // past the timeout
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="sso"`)
			w.WriteHeader(401)
		}
	}))
	defer ep.Close()
	ttl := config.Duration(time.Minute)
	p := Compile("/f/", &config.Policy{Auth: "forward", ForwardAuth: config.ForwardAuth{URL: ep.URL, Timeout: config.Duration(500 * time.Millisecond), Cache: &ttl}}, "", "r")
	s := &Secrets{}
	s.keys.Store(&Keys{})
	check := func(auth string) Verdict {
		h := hdrs{"cookie": "sid=1"}
		if auth != "" {
			h["authorization"] = auth
		}
		r := &Request{Method: []byte("GET"), Clean: []byte("/f/x"), Client: netip.MustParseAddr("192.0.2.1"), Header: h, Now: time.Now(),
			Host: []byte("a.test"), Target: []byte("/f/x?y=1"), TLS: true}
		v := s.Check(p, r)
		if v.Slow != nil {
			v.Slow()
			r.Now = time.Now()
			v = s.Check(p, r)
		}
		return v
	}
	for _, tc := range []struct {
		auth          string
		status        int
		challenge, to string
	}{
		{"Bearer good", 0, "", ""},
		{"", 401, `Bearer realm="sso"`, ""},
		{"Bearer login", 302, "", "https://login.test/?next=/f/x?y=1"},
		{"Bearer banned", 403, "", ""},
		{"Bearer broken", 503, "", ""},
		{"Bearer slow", 503, "", ""},
	} {
		v := check(tc.auth)
		if v.Status != tc.status || v.Challenge != tc.challenge || v.Location != tc.to || (tc.status != 0 && v.Reason != ReasonForward) {
			t.Errorf("%q: %+v", tc.auth, v)
		}
	}
	for k, want := range map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "a.test",
		"X-Forwarded-Uri": "/f/x?y=1", "X-Forwarded-For": "192.0.2.1", "Cookie": "sid=1"} {
		if got := last.Load().Get(k); got != want {
			t.Errorf("the endpoint got %s %q, want %q", k, got, want)
		}
	}
	// Kept: asking again with the same credentials does not ask the
	// endpoint; other credentials do.
	n := asked.Load()
	if v := check("Bearer good"); v.Status != 0 || asked.Load() != n {
		t.Fatalf("a kept answer asked again: %+v, %d asks", v, asked.Load()-n)
	}
	if check("Bearer banned"); asked.Load() != n {
		t.Fatal("a kept refusal asked again")
	}
	check("Bearer other")
	if asked.Load() != n+1 {
		t.Fatal("new credentials were not asked about")
	}

	// Cache "0s": every request asks.
	zero := config.Duration(0)
	p0 := Compile("/f/", &config.Policy{Auth: "forward", ForwardAuth: config.ForwardAuth{URL: ep.URL, Timeout: config.Duration(time.Second), Cache: &zero}}, "", "r")
	n = asked.Load()
	for i := 0; i < 3; i++ {
		r := &Request{Method: []byte("GET"), Clean: []byte("/f/x"), Header: hdrs{"authorization": "Bearer good"}, Now: time.Now()}
		v := s.Check(p0, r)
		if v.Slow == nil {
			t.Fatal("cache 0s: an answer was kept")
		}
		v.Slow()
		if v = s.Check(p0, r); v.Status != 0 || v.Slow != nil {
			t.Fatalf("cache 0s: %+v", v)
		}
	}
	if asked.Load() != n+3 {
		t.Fatalf("cache 0s: %d asks for 3 requests", asked.Load()-n)
	}
}
