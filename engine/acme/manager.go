package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
)

// ALPN is the ALPN protocol of TLS-ALPN-01 challenges (RFC 8737). A
// handshake that negotiates it has answered the CA and is closed: it
// never reaches an HTTP driver.
const ALPN = "acme-tls/1"

// Manager gets and renews the certificates of names with tls.acme,
// through certmagic (issuance, renewal, storage shared by a fleet with
// lock files, OCSP stapling, retries with back-off). The engine asks it
// for a name's certificate at each handshake, and for the answers to
// Challenges; it never blocks a reactor (challenge lookups that may read
// storage run on a worker).
type Manager struct {
	// Immutable after newACME.
	log     *slog.Logger
	magic   *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	storage string
	http01  bool
	TLSALPN bool

	mu     sync.Mutex
	Names  []string           // guarded by mu: the names managed
	status map[string]*Status // guarded by mu
	// stored holds the certificates storage had for managed names when
	// they were added (start, a reload), until certmagic's cache has
	// them: certmagic loads stored certificates on goroutines of its
	// own (ManageAsync), and a handshake that comes first must still get
	// the certificate. An entry goes when certmagic reports the name
	// cached, or the name is no longer managed.
	stored map[string]*tls.Certificate // guarded by mu
	cancel context.CancelFunc          // guarded by mu; set by start
	runCtx context.Context             // guarded by mu; set by start
}

// Status is what the engine knows of one name's certificate; it is
// also kept in the storage directory, for engine preflight -c.
type Status struct {
	Name        string    `json:"name"`
	NotBefore   time.Time `json:"not_before,omitzero"`   // of the certificate served, when there is one
	NotAfter    time.Time `json:"not_after,omitzero"`    // of the certificate served, when there is one
	Obtained    time.Time `json:"obtained,omitzero"`     // when this engine last got one from the CA
	LastAttempt time.Time `json:"last_attempt,omitzero"` // when it last asked the CA
	LastError   string    `json:"last_error,omitempty"`  // the last attempt's error; empty after a success
	Missing     string    `json:"missing,omitempty"`     // why there is none
	lastLog     time.Time // when a refused handshake for it was last logged
}

// New prepares the manager for cfg's ACME names, creating the storage
// directory when create is set. Nothing is asked of the CA until Start.
// Errors name the config key.
func New(cfg *config.Config, log *slog.Logger, create bool) (*Manager, error) {
	a := &cfg.ACME
	names := cfg.ACMENames()
	m := &Manager{
		log: log.With("acme", a.CA), Names: names, storage: a.Storage,
		http01: a.HasChallenge(config.ChallengeHTTP), TLSALPN: a.HasChallenge(config.ChallengeTLSALPN),
		status: map[string]*Status{}, stored: map[string]*tls.Certificate{},
	}
	for _, n := range names {
		m.status[n] = &Status{Name: n, Missing: "not obtained yet"}
	}
	if create {
		if err := os.MkdirAll(filepath.Join(a.Storage, "engine"), 0o700); err != nil {
			return nil, &config.Error{File: cfg.File(), Line: cfg.Line("acme.storage"), Key: "acme.storage",
				Msg: fmt.Sprintf("cannot create the ACME storage directory: %v; expected a directory the engine may write (certificates, keys and the account live there)", err)}
		}
	}
	var roots *x509.CertPool
	if a.CARoot != "" {
		pem, err := os.ReadFile(a.CARoot)
		roots = x509.NewCertPool()
		if err != nil || !roots.AppendCertsFromPEM(pem) {
			return nil, &config.Error{File: cfg.File(), Line: cfg.Line("acme.ca_root"), Key: "acme.ca_root",
				Msg: fmt.Sprintf("%s holds no PEM certificate; expected the roots of the CA's HTTPS server", a.CARoot)}
		}
	}
	zl := zap.New(&zapToSlog{log: m.log, limit: &logGate{}})
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		RenewCheckInterval: a.RenewInterval.D(),
		OCSPCheckInterval:  a.OCSPInterval.D(),
		Logger:             zl,
	})
	m.magic = certmagic.New(m.cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: a.Storage},
		Logger:  zl,
		OnEvent: m.onEvent,
		// Only the events onEvent reads: certmagic builds the others'
		// data otherwise, tls_get_certificate at every handshake.
		ShouldEmitFunc: func(event string) bool {
			switch event {
			case "cert_obtaining", "cert_obtained", "cert_failed", "cached_managed_cert":
				return true
			}
			return false
		},
	})
	listenHost, tlsPort := splitPort(cfg.Listen)
	_, httpPort := splitPort(cfg.RedirectHTTP.Listen)
	m.issuer = certmagic.NewACMEIssuer(m.magic, certmagic.ACMEIssuer{
		CA:                      a.CA,
		Email:                   a.Email,
		Agreed:                  a.Agree,
		Profile:                 a.Profile,
		TrustedRoots:            roots,
		DisableHTTPChallenge:    !m.http01,
		DisableTLSALPNChallenge: !m.TLSALPN,
		// certmagic solves a challenge with a listener of its own when
		// it can bind the port; on the engine's ports it cannot (they
		// are bound, SO_REUSEPORT, by the engine), so it leaves the
		// answer to the engine's handshake and HTTP path.
		ListenHost:     listenHost,
		AltTLSALPNPort: tlsPort,
		AltHTTPPort:    httpPort,
		Logger:         zl,
	})
	m.magic.Issuers = []certmagic.Issuer{m.issuer}
	return m, nil
}

// splitPort returns the host and port of addr ("" and 0 when it has none).
func splitPort(addr string) (string, int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// Start has certmagic manage the Names: it loads what storage has into
// its cache and asks the CA, in the background, for the certificates
// storage has not and those due for renewal. It does not wait for the
// CA. (The stored certificates are served before that: see loadStored,
// which New calls before it binds a socket.)
func (m *Manager) Start() error {
	ctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.cancel, m.runCtx = cancel, ctx
	names := m.Names
	m.mu.Unlock()
	if err := m.magic.ManageAsync(ctx, names); err != nil {
		return fmt.Errorf("engine: acme: %w", err)
	}
	m.log.Info("ACME: managing certificates", "names", strings.Join(names, ","), "storage", m.storage,
		"challenges", m.Challenges())
	return nil
}

func (m *Manager) Challenges() string {
	var c []string
	if m.TLSALPN {
		c = append(c, config.ChallengeTLSALPN)
	}
	if m.http01 {
		c = append(c, config.ChallengeHTTP)
	}
	return strings.Join(c, ",")
}

// SetNames makes names the managed set (a reload): new names are loaded
// from storage or obtained in the background, names left out are
// dropped from the cache and no longer renewed. Their certificates stay
// in storage.
func (m *Manager) SetNames(names []string) error {
	m.mu.Lock()
	old := map[string]bool{}
	for _, n := range m.Names {
		old[n] = true
	}
	var added []string
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
		if !old[n] {
			added = append(added, n)
			m.status[n] = &Status{Name: n, Missing: "not obtained yet"}
		}
	}
	var removed []certmagic.SubjectIssuer
	for n := range old {
		if !keep[n] {
			removed = append(removed, certmagic.SubjectIssuer{Subject: n})
			delete(m.status, n)
			delete(m.stored, n)
		}
	}
	m.Names = names
	m.mu.Unlock()
	if len(removed) > 0 {
		m.cache.RemoveManaged(removed)
	}
	if ctx := m.ctx(); len(added) > 0 && ctx != nil { // before start, start manages them
		m.LoadStored(ctx, added)
		if err := m.magic.ManageAsync(ctx, added); err != nil {
			return fmt.Errorf("engine: acme: %w", err)
		}
		m.log.Info("ACME: managing new names after a reload", "names", strings.Join(added, ","))
	}
	return nil
}

// storedLoadTimeout bounds the reading of stored certificates at start
// or reload (storage may be a shared network file system).
const storedLoadTimeout = 10 * time.Second

// LoadStored reads the certificate storage holds for each of names, so
// that the first handshake for a name gets it: certmagic's ManageAsync
// loads them on goroutines of its own, which a handshake arriving at once
// can overtake. New calls it before it binds a socket (quic-go completes
// handshakes from the moment its socket is bound, before Run), and a
// reload before it manages added names. A certificate
// that cannot be read, or is not valid now, is left to certmagic (which
// renews or obtains it in the background).
func (m *Manager) LoadStored(ctx context.Context, names []string) {
	ctx, cancel := context.WithTimeout(ctx, storedLoadTimeout)
	defer cancel()
	st := m.magic.Storage
	key := m.issuer.IssuerKey()
	now := time.Now()
	for _, n := range names {
		certPEM, err := st.Load(ctx, certmagic.StorageKeys.SiteCert(key, n))
		if err != nil {
			continue // none yet: certmagic obtains one
		}
		keyPEM, err := st.Load(ctx, certmagic.StorageKeys.SitePrivateKey(key, n))
		if err != nil {
			m.log.Warn("ACME: a stored certificate has no readable key; certmagic will replace it", "name", n, "err", err)
			continue
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			m.log.Warn("ACME: a stored certificate cannot be used; certmagic will replace it", "name", n, "err", err)
			continue
		}
		if cert.Leaf == nil || cert.Leaf.VerifyHostname(n) != nil {
			m.log.Warn("ACME: a stored certificate is not for its name; certmagic will replace it", "name", n)
			continue
		}
		if now.Before(cert.Leaf.NotBefore) || now.After(cert.Leaf.NotAfter) {
			// certmagic still serves it (clients see why it fails) while
			// it asks the CA for another.
			m.log.Warn("ACME: the stored certificate is not valid now; it is renewed in the background",
				"name", n, "not_before", cert.Leaf.NotBefore.UTC(), "not_after", cert.Leaf.NotAfter.UTC())
			continue
		}
		m.mu.Lock()
		if st := m.status[n]; st != nil {
			m.stored[n] = &cert
			st.NotAfter, st.Missing = cert.Leaf.NotAfter, ""
		}
		m.mu.Unlock()
	}
}

// ctx is the context of the manager's orders, cancelled by stop.
func (m *Manager) ctx() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runCtx
}

// Manages reports whether name (normalized) is one of the managed names:
// the only names whose challenges are looked up, in memory or storage.
func (m *Manager) Manages(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.status[name]
	return ok
}

// Stop ends renewals and obtains under way.
func (m *Manager) Stop() {
	m.mu.Lock()
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	m.cache.Stop()
}

// Certificate returns name's certificate for a handshake, or nil when
// there is none yet: crypto/tls then answers unrecognized_name (it has
// no other certificate to offer), and the refusal is logged with what
// the engine knows, at most every 10 s per name.
func (m *Manager) Certificate(hello *tls.ClientHelloInfo, name string) *tls.Certificate {
	h := *hello
	h.ServerName = name
	cert, err := m.magic.GetCertificate(&h)
	if err == nil && cert != nil && len(cert.Certificate) > 0 {
		return cert
	}
	now := time.Now()
	m.mu.Lock()
	if c := m.stored[name]; c != nil && now.Before(c.Leaf.NotAfter) {
		m.mu.Unlock()
		return c // certmagic has not loaded it yet
	}
	st := m.status[name]
	logIt := st != nil && now.Sub(st.lastLog) >= 10*time.Second
	var why string
	if logIt {
		st.lastLog = now
		why = st.Missing
		if st.LastError != "" {
			why += "; last error: " + st.LastError
		}
	}
	m.mu.Unlock()
	if logIt {
		m.log.Warn("TLS handshake refused (unrecognized_name): no certificate for this name yet; ACME is obtaining one in the background",
			"name", name, "peer", remoteOf(hello), "state", why)
	}
	return nil
}

func remoteOf(hello *tls.ClientHelloInfo) string {
	if hello.Conn != nil && hello.Conn.RemoteAddr() != nil {
		return hello.Conn.RemoteAddr().String()
	}
	return ""
}

// ChallengeConfig returns the TLS configuration for a TLS-ALPN-01
// challenge handshake (the client offers acme-tls/1 alone, with SNI):
// certmagic gives the challenge certificate, and the handshake
// negotiates acme-tls/1 so that the connection is closed after it.
func (m *Manager) ChallengeConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.GetConfigForClient = nil
	c.NextProtos = []string{ALPN}
	c.GetCertificate = m.magic.GetCertificate
	c.SessionTicketsDisabled = true
	c.MinVersion = tls.VersionTLS12
	return c
}

// IsChallengeHello reports whether hello is a TLS-ALPN-01 validation.
func IsChallengeHello(hello *tls.ClientHelloInfo) bool {
	return hello.ServerName != "" && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ALPN
}

// HTTPChallenge answers an HTTP-01 validation request from the
// Challenges this process started, without blocking: ok is false when
// it has none for host (another engine sharing the storage may have
// started it: see httpChallengeStored).
func (m *Manager) HTTPChallenge(host, path string) (body string, ok bool) {
	if !m.http01 {
		return "", false
	}
	ch, found := certmagic.GetACMEChallenge(host)
	if !found || ch.Type != acme.ChallengeTypeHTTP01 || ch.HTTP01ResourcePath() != path {
		return "", false
	}
	m.log.Info("ACME: answered an http-01 challenge", "name", host)
	return ch.KeyAuthorization, true
}

// HTTPChallengeStored answers an HTTP-01 validation request from the
// shared storage (a challenge another engine of the fleet started). It
// reads files: call it on a worker.
func (m *Manager) HTTPChallengeStored(host, path string) (body string, ok bool) {
	if !m.http01 {
		return "", false
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(host, "80")+path, nil)
	if err != nil {
		return "", false
	}
	req.Host = host
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	w := &challengeWriter{h: http.Header{}}
	if !m.issuer.HandleHTTPChallenge(w, req) || w.status >= 300 {
		return "", false
	}
	return string(w.body), true
}

// challengeWriter is the http.ResponseWriter certmagic writes a stored
// challenge's answer to.
type challengeWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *challengeWriter) Header() http.Header { return w.h }
func (w *challengeWriter) Write(p []byte) (int, error) {
	if len(w.body)+len(p) > 4096 {
		return 0, errors.New("challenge answer too long")
	}
	w.body = append(w.body, p...)
	return len(p), nil
}
func (w *challengeWriter) WriteHeader(status int) { w.status = status }

// onEvent follows certmagic's events: the name's status, a log line, and
// the status file engine preflight -c reads.
func (m *Manager) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	switch event {
	case "cert_obtaining":
		renewal, _ := data["renewal"].(bool)
		m.update(name, func(st *Status) { st.LastAttempt = time.Now() })
		m.log.Info("ACME: asking the CA for a certificate", "name", name, "renewal", renewal)
	case "cert_obtained":
		renewal, _ := data["renewal"].(bool)
		m.update(name, func(st *Status) { st.Obtained, st.LastError = time.Now(), "" })
		m.log.Info("ACME: certificate obtained", "name", name, "renewal", renewal)
	case "cert_failed":
		renewal, _ := data["renewal"].(bool)
		err, _ := data["error"].(error)
		msg := "unknown error"
		if err != nil {
			msg = err.Error()
		}
		m.update(name, func(st *Status) {
			st.LastError = msg
			if st.NotAfter.IsZero() {
				st.Missing = "not obtained yet"
			}
		})
		m.log.Warn("ACME: could not get a certificate; certmagic retries with back-off (1m, 2m, 2m, 5m, 10m, ...)",
			"name", name, "renewal", renewal, "err", msg)
	case "cached_managed_cert":
		sans, _ := data["sans"].([]string)
		for _, n := range sans {
			m.refresh(n)
			m.mu.Lock()
			delete(m.stored, routing.Normalize(n)) // certmagic serves it from now on
			m.mu.Unlock()
		}
	}
	return nil
}

// refresh reads the expiry of name's cached certificate into its status.
func (m *Manager) refresh(name string) {
	name = routing.Normalize(name)
	var notAfter time.Time
	for _, c := range m.cache.AllMatchingCertificates(name) {
		if c.Leaf != nil && c.Leaf.NotAfter.After(notAfter) {
			notAfter = c.Leaf.NotAfter
		}
	}
	m.update(name, func(st *Status) {
		if !notAfter.IsZero() {
			st.NotAfter, st.Missing = notAfter, ""
		}
	})
}

// update changes name's status and saves it to storage.
func (m *Manager) update(name string, fn func(*Status)) {
	name = routing.Normalize(name)
	m.mu.Lock()
	st := m.status[name]
	if st == nil {
		m.mu.Unlock()
		return
	}
	fn(st)
	b, err := json.MarshalIndent(st, "", "  ")
	m.mu.Unlock()
	if err == nil {
		err = writeFileAtomic(statusPath(m.storage, name), append(b, '\n'))
	}
	if err != nil {
		m.log.Warn("ACME: cannot save the status of a name", "name", name, "err", err)
	}
}

func statusPath(storage, name string) string {
	return filepath.Join(storage, "engine", "status", name+".json")
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so a reader sees the old content or the new, whole.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// Report tells, for engine preflight -c, what storage holds for each
// of cfg's ACME Names: the certificate's expiry, or none and the last
// error a running engine saved. It reads storage only; it asks no CA.
func Report(cfg *config.Config) []Status {
	names := cfg.ACMENames()
	if len(names) == 0 {
		return nil
	}
	if _, err := os.Stat(cfg.ACME.Storage); err != nil {
		out := make([]Status, len(names))
		for i, n := range names {
			out[i] = Status{Name: n, Missing: fmt.Sprintf("no certificate: storage %s: %v", cfg.ACME.Storage, err)}
		}
		return out
	}
	m, err := New(cfg, slog.New(slog.DiscardHandler), false)
	out := make([]Status, 0, len(names))
	for _, n := range names {
		st := Status{Name: n}
		if b, rerr := os.ReadFile(statusPath(cfg.ACME.Storage, n)); rerr == nil {
			json.Unmarshal(b, &st)
			st.Name = n
		}
		st.NotAfter = time.Time{}
		switch {
		case err != nil:
			st.Missing = err.Error()
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, lerr := m.magic.CacheManagedCertificate(ctx, n)
			cancel()
			if lerr != nil || c.Leaf == nil {
				st.Missing = "no certificate in " + cfg.ACME.Storage
			} else {
				st.NotBefore, st.NotAfter = c.Leaf.NotBefore, c.Leaf.NotAfter
			}
		}
		out = append(out, st)
	}
	if m != nil {
		m.cache.Stop()
	}
	return out
}
