package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// Headers gives a request's fields by lowercase name: the first value
// (Get), or every value in order (Values).
type Headers interface {
	Get(lowercaseName string) []byte
	Values(lowercaseName string, dst [][]byte) [][]byte
}

// Request is what a check needs of a request, whatever its protocol.
type Request struct {
	Method []byte
	Clean  []byte // the path as the site reads it (Table.Match's)
	Query  []byte // raw, without "?"
	Client netip.Addr
	Header Headers
	Now    time.Time
	// For auth = "forward": the Host as sent, the target (path and
	// query) as sent, and whether the request came over TLS.
	Host, Target []byte
	TLS          bool
}

// Refusal reasons, as /metrics and the log name them.
const (
	ReasonAddress   = "address"
	ReasonPreflight = "preflight"
	ReasonUnsigned  = "unsigned"
	ReasonSignature = "signature"
	ReasonExpired   = "expired"
	ReasonToken     = "token"
	ReasonPassword  = "password"
	ReasonForward   = "forward"
	ReasonSecrets   = "secrets"
	ReasonThrottled = "throttled"
	ReasonAmbiguous = "ambiguous"
)

// Reasons lists every refusal reason, for metrics.
var Reasons = []string{ReasonAddress, ReasonPreflight, ReasonUnsigned, ReasonSignature, ReasonExpired,
	ReasonToken, ReasonPassword, ReasonForward, ReasonSecrets, ReasonThrottled, ReasonAmbiguous}

// ReasonIndex is reason's index in Reasons.
func ReasonIndex(reason string) int {
	for i, r := range Reasons {
		if r == reason {
			return i
		}
	}
	return len(Reasons) - 1
}

// Verdict is a check's answer.
type Verdict struct {
	// Status is 0 when the request may go on, else the status to
	// answer: 204 for a preflight, 401 or 403 for a refusal, 503 when
	// the secrets to check against could not be read.
	Status int
	Reason string // a refusal's, for metrics (one of Reasons)
	Detail error  // a refusal's cause, for the log; never sent
	// Challenge is the WWW-Authenticate of a 401; Location, that of a
	// redirect a forward auth endpoint answered (to its login page).
	Challenge, Location string
	// Origin is the request's Origin when CORS allows it.
	Origin    string
	Preflight bool
	// SigQuery is a signed request's signature parameters, for the Link
	// to the file's outboard tree: the request's query (aliased) when it
	// holds nothing else.
	SigQuery []byte
	// Slow is set when the answer needs a password hash computed: run
	// it on a worker, then check the request again.
	Slow func()
}

// Secrets are what requests are checked against, read from files: the
// signing keys and each path's credentials. Swapped whole on Reload.
type Secrets struct {
	keyFiles map[string]string
	keys     atomic.Pointer[Keys]
	paths    []*Path // those with credentials
}

// NewSecrets reads the signing keys (id -> file) and the credentials of
// every path that has some.
func NewSecrets(keyFiles map[string]string, paths []*Path) (*Secrets, error) {
	s := &Secrets{keyFiles: keyFiles}
	for _, p := range paths {
		if p.credFile != "" {
			s.paths = append(s.paths, p)
		}
	}
	return s, s.Reload()
}

// Reload reads every secret again. Either all of them are read and swapped
// in, or none is and the error says which could not be.
func (s *Secrets) Reload() error {
	keys, err := LoadKeys(s.keyFiles)
	if err != nil {
		return err
	}
	creds := make([]*Credentials, len(s.paths))
	for i, p := range s.paths {
		if creds[i], err = LoadCredentials(p.credFile, p.Auth == AuthBasic); err != nil {
			return fmt.Errorf("credentials of %s: %w", p.Prefix, err)
		}
	}
	s.keys.Store(keys)
	for i, p := range s.paths {
		p.creds.Store(creds[i])
	}
	return nil
}

// Keys returns the signing keys in use.
func (s *Secrets) Keys() *Keys { return s.keys.Load() }

var errNoAuthorization = errors.New("no credentials")

// Check judges request r against path p: address rules, then a CORS
// preflight, then auth.
func (s *Secrets) Check(p *Path, r *Request) Verdict {
	var v Verdict
	if p.cors {
		v.Origin = p.AllowOrigin(r.Header.Get("origin"))
	}
	if !p.Admits(r.Client) {
		return Verdict{Status: 403, Reason: ReasonAddress, Detail: fmt.Errorf("address %s is not allowed", r.Client), Origin: v.Origin}
	}
	if string(r.Method) == "OPTIONS" && p.cors {
		if acrm := r.Header.Get("access-control-request-method"); acrm != nil && r.Header.Get("origin") != nil {
			// Preflights carry no credentials (Fetch): they are answered
			// before auth, and tell nothing but the CORS rules.
			if v.Origin == "" || !p.PreflightOK(acrm, r.Header.Get("access-control-request-headers")) {
				return Verdict{Status: 403, Reason: ReasonPreflight, Detail: fmt.Errorf("preflight for origin %q, method %q refused", r.Header.Get("origin"), acrm)}
			}
			v.Status, v.Preflight = 204, true
			return v
		}
	}
	if p.Auth == AuthBasic || p.Auth == AuthBearer || p.Auth == AuthForward {
		// Two Authorization fields: the engine would judge one and an
		// upstream might read the other.
		var buf [2][]byte
		if len(r.Header.Values("authorization", buf[:0])) > 1 {
			return v.refuse(400, ReasonAmbiguous, errors.New("more than one Authorization field"))
		}
	}
	switch p.Auth {
	case AuthSigned:
		if s == nil {
			return v.refuse(503, ReasonSecrets, errors.New("no signing keys"))
		}
		sigOnly, err := s.keys.Load().verify(r.Query, r.Clean, r.Client, r.Now)
		switch {
		case err == nil:
			v.SigQuery = r.Query
			if !sigOnly {
				v.SigQuery = SignatureQuery(r.Query)
			}
		case errors.Is(err, ErrUnsigned):
			return v.refuse(403, ReasonUnsigned, err)
		case errors.Is(err, ErrExpired):
			return v.refuse(403, ReasonExpired, err)
		default:
			return v.refuse(403, ReasonSignature, err)
		}
	case AuthBearer:
		creds := p.creds.Load()
		tok, ok := ParseBearer(r.Header.Get("authorization"))
		if !ok {
			v = v.refuse(401, ReasonToken, errNoAuthorization)
			v.Challenge = "Bearer realm=" + quote(p.Realm)
			return v
		}
		if creds.Bearer(tok) == "" {
			v = v.refuse(401, ReasonToken, errors.New("token not listed"))
			v.Challenge = "Bearer realm=" + quote(p.Realm) + `, error="invalid_token"`
			return v
		}
	case AuthForward:
		return p.fwd.check(p, r, v)
	case AuthBasic:
		creds := p.creds.Load()
		user, pass, ok := ParseBasic(r.Header.Get("authorization"))
		if !ok {
			return v.basicChallenge(p, errNoAuthorization)
		}
		switch creds.Cached(user, pass, r.Now) {
		case Bad:
			return v.basicChallenge(p, fmt.Errorf("wrong user or password (user %q)", user))
		case Unknown:
			client := r.Client
			if !creds.Admit(client) {
				v = v.refuse(429, ReasonThrottled, fmt.Errorf("more than %d password checks waiting for this client, or %d in all", pendingPerClient, pendingMax))
				return v
			}
			u, pw := string(user), string(pass) // the request's buffers do not outlive this call
			v.Slow = func() {
				defer creds.Release(client)
				creds.Verify([]byte(u), []byte(pw))
			}
			return v
		}
	}
	return v
}

func (v Verdict) refuse(status int, reason string, err error) Verdict {
	v.Status, v.Reason, v.Detail = status, reason, err
	return v
}

func (v Verdict) basicChallenge(p *Path, err error) Verdict {
	v = v.refuse(401, ReasonPassword, err)
	v.Challenge = "Basic realm=" + quote(p.Realm) + `, charset="UTF-8"`
	return v
}

// quote writes s as an HTTP quoted-string (control characters left
// out).
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
