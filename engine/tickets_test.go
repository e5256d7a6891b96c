package engine_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// anyNameCache is a client session cache that offers the last ticket it
// got to every server name: what a client (or an attacker) that ignores
// names does.
type anyNameCache struct {
	mu   sync.Mutex
	last *tls.ClientSessionState
}

func (c *anyNameCache) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.last != nil
}

func (c *anyNameCache) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs != nil {
		c.last = cs
	}
}

// TestTicketsBoundToName: a TLS 1.3 session ticket resumes only under the
// server name it was issued for, over TCP and QUIC. A ticket from b.test
// offered for a.test (another certificate) gets a full handshake with
// a.test's certificate, not a resumed session that never showed it; the
// ticket resumes for b.test.
func TestTicketsBoundToName(t *testing.T) {
	ts := start(t, twoSites(t, "f.txt", "site-a", "site-b", "", ""))
	for _, proto := range []string{"h1", "h3"} {
		cache := &anyNameCache{}
		get := func(name string) (body string, resumed bool, subject string) {
			t.Helper()
			cfg := &tls.Config{ServerName: name, InsecureSkipVerify: true, ClientSessionCache: cache}
			var rt http.RoundTripper
			if proto == "h1" {
				tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
				defer tr.CloseIdleConnections()
				rt = tr
			} else {
				tr := &http3.Transport{TLSClientConfig: cfg}
				defer tr.Close()
				rt = tr
			}
			req, _ := http.NewRequest("GET", "https://"+ts.addr+"/f.txt", nil)
			req.Host = name
			resp, err := (&http.Client{Transport: rt, Timeout: scale(20 * time.Second)}).Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", proto, name, err)
			}
			defer resp.Body.Close()
			bb, _ := io.ReadAll(resp.Body)
			subject = "?"
			if len(resp.TLS.PeerCertificates) > 0 {
				subject = resp.TLS.PeerCertificates[0].DNSNames[0]
			}
			return string(bb), resp.TLS.DidResume, subject
		}
		if body, _, _ := get("b.test"); body != "site-b" {
			t.Fatalf("%s b.test: %q", proto, body)
		}
		// The ticket arrives after the handshake; the client has it once
		// it read the response. The same name resumes with it (against a
		// test that passes because nothing ever resumes).
		if _, resumed, _ := get("b.test"); !resumed {
			t.Fatalf("%s: b.test's ticket offered for b.test did not resume", proto)
		}
		if body, resumed, subject := get("a.test"); resumed || subject != "a.test" || body != "site-a" {
			t.Errorf("%s: b.test's ticket offered for a.test: resumed %v, certificate %s, body %q; want a full handshake with a.test's certificate", proto, resumed, subject, body)
		}
	}
}
