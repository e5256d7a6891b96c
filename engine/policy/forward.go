package policy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mediaship/engine/engine/config"
)

// forwarder asks an HTTP endpoint whether requests may pass (auth =
// "forward"), as nginx's auth_request and Caddy's forward_auth do, and
// keeps its answers for a while, keyed by what the request presented.
type forwarder struct {
	url     string
	timeout time.Duration
	ttl     time.Duration // 0: an answer serves only the request that asked
	client  *http.Client

	mu      sync.Mutex
	answers map[[32]byte]fwdAnswer
	salt    [32]byte
}

// fwdAnswer is an endpoint's answer to one set of credentials.
type fwdAnswer struct {
	status    int    // 0: pass; else the status to answer
	challenge string // WWW-Authenticate of a 401
	location  string // Location of a redirect (to a login page)
	detail    string
	until     time.Time
	once      bool // ttl 0: taken by the first lookup
}

// fwdMax bounds the answers kept; past it the cache starts over.
const fwdMax = 8192

// fwdBody bounds what is read of an endpoint's answer body (discarded).
const fwdBody = 64 << 10

func newForwarder(fa *config.ForwardAuth) *forwarder {
	f := &forwarder{url: fa.URL, timeout: fa.Timeout.D(), answers: map[[32]byte]fwdAnswer{}}
	if fa.Cache != nil {
		f.ttl = fa.Cache.D()
	}
	rand.Read(f.salt[:])
	f.client = &http.Client{
		Timeout: f.timeout,
		// A redirect is an answer (to a login page), never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			Proxy:               nil, // the endpoint is asked directly, whatever the environment says
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			TLSHandshakeTimeout: f.timeout,
		},
	}
	return f
}

// key is what an answer is kept under: the credentials the request
// presented, and where it goes (the host and the policy's prefix),
// through a keyed hash so the cache holds no credential.
func (f *forwarder) key(prefix string, r *Request) [32]byte {
	h := sha256.New()
	h.Write(f.salt[:])
	for _, b := range [][]byte{r.Host, []byte(prefix), r.Header.Get("authorization"), r.Header.Get("cookie")} {
		h.Write(b)
		h.Write([]byte{0})
	}
	return [32]byte(h.Sum(nil))
}

func (f *forwarder) lookup(k [32]byte, now time.Time) (fwdAnswer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.answers[k]
	switch {
	case !ok:
		return a, false
	case a.once:
		delete(f.answers, k)
	case now.After(a.until):
		delete(f.answers, k)
		return a, false
	}
	return a, true
}

func (f *forwarder) keep(k [32]byte, a fwdAnswer) {
	if f.ttl <= 0 {
		a.once = true
	} else {
		a.until = time.Now().Add(f.ttl)
	}
	f.mu.Lock()
	if len(f.answers) >= fwdMax {
		clear(f.answers)
	}
	f.answers[k] = a
	f.mu.Unlock()
}

// fwdRequest is what the endpoint is told of a request, copied off the
// request's buffers (it is asked from a worker).
type fwdRequest struct {
	method, proto, host, uri, client, authorization, cookie string
	hasAuth, hasCookie                                      bool
}

func snapshot(r *Request) fwdRequest {
	proto := "http"
	if r.TLS {
		proto = "https"
	}
	a, c := r.Header.Get("authorization"), r.Header.Get("cookie")
	return fwdRequest{method: string(r.Method), proto: proto, host: string(r.Host), uri: string(r.Target),
		client: r.Client.String(), authorization: string(a), cookie: string(c), hasAuth: a != nil, hasCookie: c != nil}
}

// ask asks the endpoint about q and keeps its answer under k.
func (f *forwarder) ask(k [32]byte, q fwdRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", f.url, nil)
	if err != nil {
		f.keep(k, fwdAnswer{status: 503, detail: err.Error()})
		return
	}
	h := req.Header
	h.Set("X-Forwarded-Method", q.method)
	h.Set("X-Forwarded-Proto", q.proto)
	h.Set("X-Forwarded-Host", q.host)
	h.Set("X-Forwarded-Uri", q.uri)
	h.Set("X-Forwarded-For", q.client)
	if q.hasAuth {
		h.Set("Authorization", q.authorization)
	}
	if q.hasCookie {
		h.Set("Cookie", q.cookie)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.keep(k, fwdAnswer{status: 503, detail: "the auth endpoint did not answer: " + err.Error()})
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, fwdBody))
	resp.Body.Close()
	a := fwdAnswer{detail: fmt.Sprintf("the auth endpoint answered %d", resp.StatusCode)}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
	case s == 401:
		a.status, a.challenge = 401, oneLine(resp.Header.Get("WWW-Authenticate"))
	case s == 403:
		a.status = 403
	case s == 301 || s == 302 || s == 303 || s == 307 || s == 308:
		a.status, a.location = s, oneLine(resp.Header.Get("Location"))
		if a.location == "" {
			a.status = 503
		}
	default:
		a.status = 503
	}
	f.keep(k, a)
}

// oneLine keeps a field value from an endpoint only if it is one line.
func oneLine(v string) string {
	if strings.ContainsAny(v, "\r\n\x00") {
		return ""
	}
	return v
}

var errForward = errors.New("the auth endpoint refused")

// check is Check's part for auth = "forward".
func (f *forwarder) check(p *Path, r *Request, v Verdict) Verdict {
	k := f.key(p.Prefix, r)
	a, ok := f.lookup(k, r.Now)
	if !ok {
		q := snapshot(r)
		v.Slow = func() { f.ask(k, q) }
		return v
	}
	if a.status == 0 {
		return v
	}
	v = v.refuse(a.status, ReasonForward, fmt.Errorf("%w: %s", errForward, a.detail))
	v.Challenge, v.Location = a.challenge, a.location
	return v
}
