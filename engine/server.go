package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/acme"
	"github.com/mediaship/engine/engine/admin"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/digests"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/passthrough"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/h1"
	"github.com/mediaship/engine/h2"
	"github.com/mediaship/engine/h3"
	"github.com/mediaship/engine/ktls"
	"github.com/mediaship/engine/preflight"
	"github.com/mediaship/engine/wt"
	"github.com/prometheus/client_golang/prometheus"
)

// Server serves the sites of a Config over HTTP/1.1 and HTTP/2 (plain or
// TLS, on a group of reactors) and HTTP/3 (quic-go, on its own UDP
// socket).
type Server struct {
	// Immutable after New.
	cfg     *config.Config
	log     *slog.Logger
	prober  *preflight.Prober
	sites   *siteTable
	cache   *files.Cache
	digests *digests.Store
	group   *reactor.Group
	alog    *accesslog.Log
	limits  h1.Limits
	h3      *h3.Server          // nil when no site serves HTTP/3
	wt      *wt.Server          // [webtransport] sessions; nil unless enabled
	proxy   *proxyTable         // nil without reverse proxy routes that terminate TLS
	pass    *passthrough.Table  // nil without passthrough routes
	quic    *passthrough.Router // QUIC passthrough; nil without it
	quicUDP *net.UDPConn        // its socket when the engine serves no HTTP/3 itself
	redir   *reactor.Group      // the [redirect_http] listener; nil without it

	// The loops' contexts (and so upstream pools), for HTTP/3 requests
	// proxied on them.
	loopMu      sync.Mutex
	loops       []*loopCtx // every serving loop's, when proxy routes need their pools
	loopNext    int
	loopMetrics []*respMetrics // every loop's, the redirect listener's too
	h3Metrics   *respMetrics   // nil without HTTP/3

	// TLS, when any site has a certificate (or serve --self-signed).
	certs     *certStore
	acme      *acme.Manager // nil without ACME names
	tlsConfig *tls.Config   // from ktls.ServerConfig
	ktlsOK    bool          // preflight found kernel TLS usable: promote
	ktlsRekey bool          // and able to rekey (KeyUpdate after promotion)

	admin   *admin.Listener // nil without [admin]
	regOnce sync.Once
	reg     *prometheus.Registry // registry() makes it
	health  atomic.Int32         // healthStarting, healthServing, healthDraining

	stats serverCounters
}

type serverCounters struct {
	requests, badRequests, notFound, serverErrors, bulk, congestionErrors atomic.Int64
	redirects, acmeChallenges                                             atomic.Int64

	h2Conns, h2Streams, h2Resets, h2ConnErrors, h2BodyFailures atomic.Int64
	h2Events                                                   [h2.EventHeaderTimeout + 1]atomic.Int64

	h3Streams, h3Resets, h3Stalled, h3Bytes atomic.Int64
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	reactor.Stats
	Requests         int64 // responses queued
	BadRequests      int64 // requests refused as malformed (4xx from the parser)
	NotFound         int64
	ServerErrors     int64 // 5xx answers
	Bulk             int64 // responses that took the bulk path
	CongestionErrors int64 // bulk responses whose congestion control could not be set
	Redirects        int64 // 308s to https:// from the [redirect_http] listener
	ACMEChallenges   int64 // ACME validations answered: tls-alpn-01 handshakes begun, http-01 key authorizations sent
	CacheEntries     int
	CacheHits        int64
	CacheMisses      int64

	TLSHandshakes      int64 // completed
	TLSHandshakeErrors int64 // failed, or not TLS at all
	TLSRecordErrors    int64 // bad records, unexpected messages: each closed its connection
	TLSAlertsReceived  int64 // fatal alerts from clients
	TLSKeyUpdates      int64 // KeyUpdate messages from clients
	TLSUserBytes       int64 // response bytes sealed in userspace
	TLSUserBatches     int64 // batches they were sealed in (one write each)
	TLSKernelBytes     int64 // response bytes handed to kernel TLS
	Promotions         int64 // connections whose transmission moved to the kernel
	PromoteFailures    int64 // promotions that failed (the connection stayed in userspace)

	H2Connections  int64 // HTTP/2 connections (ALPN h2 or h2c prior knowledge)
	H2Streams      int64 // HTTP/2 responses queued
	H2Resets       int64 // HTTP/2 streams reset before their response was out
	H2BodyFailures int64 // HTTP/2 streams reset because their file shrank under them
	H2ConnErrors   int64 // HTTP/2 connections ended by GOAWAY with an error
	// H2Events counts HTTP/2 limits hit and protocol errors by kind
	// (h2.Event).
	H2Events map[string]int64

	H3Connections int64 // HTTP/3 connections accepted
	H3Active      int64 // HTTP/3 connections open now
	H3Refused     int64 // HTTP/3 connection attempts (Initial packets) refused at max_connections
	H3Streams     int64 // HTTP/3 responses
	H3Resets      int64 // HTTP/3 responses the client reset or abandoned
	H3Stalled     int64 // HTTP/3 responses reset after send_timeout without progress
	// H3ConnErrors counts HTTP/3 connections closed with an error, by
	// side and code ("local H3_FRAME_UNEXPECTED").
	H3ConnErrors map[string]int64

	FilesHashed        int64         // digests computed in the background
	HashesJoined       int64         // hash requests that joined hashing already under way for the same content
	BytesHashed        int64         // bytes they covered
	HashTime           time.Duration // time the hashing workers spent (CPU-bound: about their CPU time)
	ManifestMismatches int64         // files whose bytes contradicted the manifest
	DigestsKnown       int           // digests in the cache

	// The reverse proxy's upstream connections.
	ProxyOpened       int64 // connections opened to upstreams
	ProxyReused       int64 // requests sent on a pooled connection
	ProxyFailed       int64 // connections that failed (refused, connect timeout): the upstream backs off
	ProxyRetried      int64 // idempotent requests sent again after a pooled connection closed under them
	ProxyTimeouts     int64 // response_timeout or send timeouts to upstreams (504)
	ProxyBadResponses int64 // upstream responses the proxy could not relay (502, or a reset mid-body)
	ProxyDrained      int64 // responses read and dropped after their client went away, to keep the connection
	ProxyH2Buffered   int64 // proxied response bytes HTTP/2 streams hold ahead of their clients, now
	ProxyQueued       int64 // requests that waited for a connection (max_conns)
	// ProxyUnsolicited counts upstream connections closed, not reused,
	// because their upstream sent bytes no request asked for (behind a
	// response, while idle, or found when taken from the pool): they
	// would have been read as the next request's response.
	ProxyUnsolicited int64

	// TLS passthrough (routes with tls_termination = false).
	PassRelayed   int64 // TCP connections relayed to an upstream
	PassActive    int64 // TCP relays open now
	PassBytesUp   int64 // bytes relayed from clients to upstreams (closed relays)
	PassBytesDown int64 // bytes relayed from upstreams to clients (closed relays)
	// PassFailures counts connections not relayed, by reason: no_sni,
	// no_route, not_tls, bad_hello, hello_timeout, upstream_unreachable.
	PassFailures map[string]int64
	// QUIC passthrough: flows relayed and open now, datagram bytes each
	// way, datagrams dropped because the engine serves no HTTP/3 of its
	// own, and ClientHellos not relayed by reason (those above, and
	// table_full; a client's retransmitted Initial counts again).
	QUICPassRelayed, QUICPassActive    int64
	QUICPassBytesUp, QUICPassBytesDown int64
	QUICPassDropped                    int64
	QUICPassUnconfirmed                int64 // flows dropped because the client never answered the upstream (after header_timeout, at most 10 s) or never finished its handshake (15 s)
	QUICPassOneSided                   int64 // flows closed because their upstream had said nothing for a while as their client kept sending (for a new flow at max_connections after 1 s, otherwise after 15 s)
	QUICPassFailures                   map[string]int64
}

// New probes the kernel features cfg requires (refusing to go on, before
// any socket is bound, when one is missing), opens the site roots and binds
// the listeners. Requests are served once Run is called. cfg must have
// passed Validate.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, prober: &preflight.Prober{}}
	if err := s.checkKernel(); err != nil {
		return nil, err
	}
	if cfg.HasTLS() {
		if err := s.setupTLS(); err != nil {
			return nil, err
		}
	}
	s.limits = h1.Limits{
		MaxHeadBytes:   int(cfg.Limits.MaxHeaderBytes),
		MaxHeaders:     cfg.Limits.MaxHeaders,
		MaxTargetBytes: int(cfg.Limits.MaxURIBytes),
	}
	var err error
	if s.proxy, err = newProxyTable(cfg); err != nil {
		return nil, err
	}
	if s.pass, err = passthrough.New(cfg); err != nil {
		return nil, err
	}
	if s.sites, err = newSiteTable(cfg); err != nil {
		return nil, err
	}
	if s.alog, err = accesslog.Open(cfg.AccessLog, cfg.AccessLogFormat, int(cfg.AccessLogBuffer), log); err != nil {
		s.sites.close()
		return nil, err
	}
	if s.digests, err = digests.New(cfg, s.sites.roots, log); err != nil {
		s.sites.close()
		s.alog.Close()
		return nil, err
	}
	s.cache = files.NewCache(files.Config{Logger: log, KnownDigest: s.digests.Known})
	rc := reactor.Config{
		Addr:     cfg.Listen,
		Workers:  cfg.Workers,
		MaxConns: cfg.Limits.MaxConnections,
		// Room for a request head, and for a whole HTTP/2 frame.
		ReadBuffer:  max(int(cfg.Limits.MaxHeaderBytes)+4<<10, 20<<10),
		SendTimeout: cfg.Limits.SendTimeout.D(),
		NewHandler:  func(l *reactor.Loop) reactor.Handler { return newConnHandler(s, l, false) },
		Logger:      log,
		NoSteering:  disabled("ENGINE_DISABLE_STEERING"),
		Pin:         cfg.PinWorkers,
	}
	// With port 0 the kernel picks the TCP port, and HTTP/3 needs the
	// same number free on UDP, which another socket may hold: pick again.
	for try := 0; ; try++ {
		if s.group, err = reactor.Listen(rc); err != nil {
			break
		}
		if err = s.listenH3(); err == nil {
			break
		}
		s.group.Close()
		if s.quicUDP != nil {
			s.quic.Close()
			s.quicUDP.Close()
			s.quic, s.quicUDP = nil, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !anyPort(cfg.Listen) || try == 4 {
			break
		}
	}
	if err == nil && cfg.RedirectHTTP.Listen != "" {
		rc.Addr, rc.Workers, rc.NoSteering, rc.Pin = cfg.RedirectHTTP.Listen, 1, true, false
		rc.NewHandler = func(l *reactor.Loop) reactor.Handler { return newConnHandler(s, l, true) }
		rc.Logger = log.With("listener", "redirect_http")
		if s.redir, err = reactor.Listen(rc); err != nil {
			err = &config.Error{File: cfg.File(), Line: cfg.Line("redirect_http.listen"), Key: "redirect_http.listen", Msg: err.Error()}
			s.group.Close()
			if s.h3 != nil {
				s.h3.Close()
			}
			if s.quicUDP != nil {
				s.quic.Close()
				s.quicUDP.Close()
			}
		}
	}
	if err == nil {
		if err = s.listenAdmin(); err != nil {
			s.group.Close()
			if s.redir != nil {
				s.redir.Close()
			}
			if s.h3 != nil {
				s.h3.Close()
			}
			if s.quicUDP != nil {
				s.quic.Close()
				s.quicUDP.Close()
			}
		}
	}
	if err != nil {
		s.cache.Close()
		s.digests.Close()
		s.sites.close()
		s.alog.Close()
		return nil, err
	}
	return s, nil
}

// RedirectAddr returns the address of the [redirect_http] listener, or ""
// without one.
func (s *Server) RedirectAddr() string {
	if s.redir == nil {
		return ""
	}
	return s.redir.Addr()
}

// anyPort reports whether addr asks for a port the kernel chooses.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && (port == "0" || port == "")
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.group.Addr() }

// Run serves until ctx is cancelled, then shuts down gracefully: it stops
// accepting, closes idle connections, and lets responses in flight finish
// for up to the configured grace period.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("serving", "addr", s.Addr(), "workers", len(s.group.Loops()), "steering", s.group.Steering(),
		"sites", s.sites.describe())
	if s.acme != nil {
		// Certificates in storage are served already (New loaded
		// them); certmagic takes over their renewal, and orders the
		// missing ones in the background.
		if err := s.acme.Start(); err != nil {
			s.log.Error("ACME could not start; names without a stored certificate get none", "err", err)
		}
		defer s.acme.Stop()
	}
	errc := make(chan error, 1)
	go func() { errc <- s.group.Run() }()
	redirDone := make(chan error, 1)
	if s.redir != nil {
		s.log.Info("redirecting HTTP to HTTPS", "addr", s.redir.Addr())
		go func() { redirDone <- s.redir.Run() }()
	} else {
		redirDone <- nil
	}
	h3done := make(chan struct{})
	if s.h3 != nil {
		s.log.Info("serving HTTP/3", "udp", s.h3.Addr().String(), "alt-svc", s.h3.AltSvc())
		go func() {
			defer close(h3done)
			if err := s.h3.Serve(); err != nil {
				s.log.Error("HTTP/3 listener stopped", "err", err)
			}
		}()
	} else {
		close(h3done)
	}
	if s.quicUDP != nil {
		s.log.Info("QUIC passthrough", "udp", s.quicUDP.LocalAddr().String())
		go s.quic.Run()
	}
	stopSaving := make(chan struct{})
	go s.digests.SaveLoop(stopSaving)
	if s.admin != nil {
		go s.admin.Serve()
	}
	s.health.Store(healthServing)
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		s.health.Store(healthDraining)
		s.log.Info("shutting down", "grace", s.cfg.ShutdownGrace.D().String())
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace.D())
		h3err := make(chan error, 1)
		go func() {
			if s.h3 == nil {
				h3err <- nil
				return
			}
			h3err <- s.h3.Shutdown(sctx)
		}()
		if s.redir != nil {
			go s.redir.Shutdown(sctx)
		}
		serr := s.group.Shutdown(sctx)
		if herr := <-h3err; serr == nil {
			serr = herr
		}
		if errors.Is(serr, context.DeadlineExceeded) {
			s.log.Warn("grace period over; closed the remaining connections")
		}
		cancel()
		err = <-errc
	}
	if s.redir != nil {
		// Stopped already after a signal; when the main listener
		// stopped on its own, this stops it too.
		ctx0, cancel := context.WithTimeout(context.Background(), time.Second)
		s.redir.Shutdown(ctx0)
		cancel()
		if rerr := <-redirDone; err == nil && rerr != nil {
			err = rerr
		}
	}
	if s.h3 != nil {
		s.h3.Close()
	}
	if s.quicUDP != nil {
		s.quic.Close()
		s.quicUDP.Close()
	}
	<-h3done
	close(stopSaving)
	s.health.Store(healthDraining)
	if s.admin != nil {
		s.admin.Close()
	}
	s.logTotals()
	s.digests.Close()
	s.cache.Close()
	s.sites.close()
	s.alog.Close()
	return err
}

// setupTLS loads the certificates and builds the TLS configuration: TLS
// 1.3 (1.2 where a site allows it), ALPN h2 and http/1.1 as the named
// site allows, session tickets on, the key exchanges of the named site.
func (s *Server) setupTLS() error {
	s.certs = &certStore{}
	if s.cfg.ACMEOn() {
		m, err := acme.New(s.cfg, s.log, true)
		if err != nil {
			return err
		}
		s.acme, s.certs.acme = m, m
		// Before any socket is bound: the certificates storage holds
		// are served from the first handshake (TCP or QUIC).
		m.LoadStored(context.Background(), m.Names)
	}
	if s.cfg.SelfSigned() {
		cert, err := selfSignedCert()
		if err != nil {
			return fmt.Errorf("engine: self-signed certificate: %w", err)
		}
		s.certs.selfSigned = cert
	}
	t, err := loadCertTable(s.cfg, s.certs.selfSigned)
	if err != nil {
		return err
	}
	s.certs.cur.Store(t)
	base := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		NextProtos:     s.alpnAll(),
		GetCertificate: s.certs.getCertificate,
	}
	allow12 := t.allow12()
	if allow12 {
		// Some site accepts TLS 1.2: offer it (ECDHE with AEAD ciphers
		// only) to clients without 1.3, for those sites, with session
		// tickets off since crypto/tls logs no keys for resumed 1.2
		// sessions.
		base.MinVersion = tls.VersionTLS12
		base.CipherSuites = ktls.TLS12SuiteIDs()
	}
	bindTickets(base)
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if s.acme != nil && s.acme.TLSALPN && acme.IsChallengeHello(hello) && s.acme.Manages(serverName(hello.ServerName)) {
			// Names the engine does not manage get an ordinary
			// handshake, which has no protocol in common with the
			// client's: no_application_protocol.
			s.stats.acmeChallenges.Add(1)
			return s.acme.ChallengeConfig(base), nil
		}
		var c *tls.Config
		clone := func() {
			if c == nil {
				c = base.Clone()
				c.GetConfigForClient = nil
			}
		}
		if allow12 && !slices.Contains(hello.SupportedVersions, tls.VersionTLS13) {
			clone()
			c.SessionTicketsDisabled = true
			if t := s.certs.cur.Load(); !t.allows12(hello.ServerName) && t.pick(serverName(hello.ServerName)) != nil {
				// This name is 1.3 only: the handshake fails
				// (protocol_version). A name nothing serves gets no
				// certificate instead: unrecognized_name.
				c.MinVersion = tls.VersionTLS13
			}
		}
		// A site that turned session tickets off gets full handshakes.
		if !s.tickets(hello.ServerName) {
			clone()
			c.SessionTicketsDisabled = true
		}
		// Key exchanges are the site's the client names, as its
		// certificate is chosen.
		if g := s.certs.cur.Load().keyExchanges(hello.ServerName); g != nil {
			clone()
			c.CurvePreferences = g
		}
		// ALPN offers what the site the client names allows.
		if p := s.alpn(hello.ServerName); !slices.Equal(p, base.NextProtos) {
			clone()
			c.NextProtos = p
		}
		return c, nil
	}
	s.tlsConfig = ktls.ServerConfig(base)
	return nil
}

// logTotals logs, at the end, what the server did in its life: how
// output met the sockets and how TLS was sealed. These are the reactor's
// own profile of a run (bytes per write, time waiting on full sockets).
func (s *Server) logTotals() {
	st := s.Stats()
	per := func(a, b int64) int64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	s.log.Info("totals", "connections", st.Accepted, "requests", st.Requests,
		"bytes", st.BytesMem+st.BytesFile, "writes", st.Writes, "bytes_per_write", per(st.BytesMem+st.BytesFile, st.Writes),
		"socket_full", st.SocketFull, "socket_full_wait", st.FullWait.Round(time.Millisecond).String(),
		"tls_handshakes", st.TLSHandshakes, "tls_user_bytes", st.TLSUserBytes, "tls_batches", st.TLSUserBatches,
		"tls_bytes_per_batch", per(st.TLSUserBytes, st.TLSUserBatches), "tls_kernel_bytes", st.TLSKernelBytes)
}

// keyExchanges is the key exchanges of the site a client names in SNI
// (key_exchanges), nil for crypto/tls's default order.
func (s *Server) keyExchanges(serverName string) []tls.CurveID {
	return s.certs.cur.Load().keyExchanges(serverName)
}

// tickets reports whether the site a client names allows session
// tickets.
func (s *Server) tickets(serverName string) bool {
	if s.sites == nil {
		return true
	}
	st, _ := s.sites.lookup([]byte(serverName), nil)
	return st == nil || st.tickets
}

// alpnAll lists every protocol some site or route offers in ALPN: the
// base configuration's, which each handshake narrows with alpn.
func (s *Server) alpnAll() []string {
	var h1, h2 bool
	for _, sc := range s.cfg.Sites {
		h1, h2 = h1 || config.On(sc.Protocols.H1), h2 || config.On(sc.Protocols.H2)
	}
	if len(s.cfg.Sites) == 0 || s.cfg.Root != "" {
		h1, h2 = true, true
	}
	if s.proxy != nil {
		h1, h2 = h1 || s.proxy.H1, h2 || s.proxy.H2
	}
	return alpnList(h1, h2)
}

// alpn lists the protocols to offer in ALPN to a client naming sni: what
// the site or route that takes the name allows. A ClientHello naming
// nothing is offered what the default allows, as for a name nothing
// names (the rule of "Names on TLS").
func (s *Server) alpn(sni string) []string {
	if s.sites == nil {
		return s.alpnAll()
	}
	if name := serverName(sni); s.proxy != nil && !s.sites.names(name) && s.proxy.HasDomain(name) {
		// A domain only routes name: what the proxy answers.
		return alpnList(s.proxy.H1, s.proxy.H2)
	}
	st, _ := s.sites.lookup([]byte(sni), nil)
	return alpnList(st.h1, st.h2)
}

// alpnList is h2 before http/1.1, as allowed.
func alpnList(h1, h2 bool) []string {
	switch {
	case h2 && h1:
		return []string{"h2", "http/1.1"}
	case h2:
		return []string{"h2"}
	}
	return []string{"http/1.1"}
}

// ReloadCertificates reads every site's certificate files again (SIGHUP
// without a config file). Connections keep going; new handshakes use the
// new certificates. On an error the old ones stay in use.
func (s *Server) ReloadCertificates() error { return s.Reload(nil) }

// Reload applies a configuration read again (SIGHUP): where certificates
// come from (each site's and the proxy's cert and key, and tls.acme) is
// applied, and the files are read again; certificates ACME obtained are
// kept, names newly given acme = true are obtained in the background, and
// names no longer managed stop being renewed. next must have passed
// Validate; nil reads the current configuration's files again. Any other
// change needs a restart: Reload then refuses, naming the keys, and keeps
// everything as it was.
func (s *Server) Reload(next *config.Config) error {
	if s.certs == nil {
		if next != nil && next.HasTLS() {
			return errors.New("engine: reload: the configuration now serves TLS, and this server was started without it; restart to apply")
		}
		return nil
	}
	s.certs.reloadMu.Lock()
	defer s.certs.reloadMu.Unlock()
	cur := s.certs.cfg
	if cur == nil {
		cur = s.cfg
	}
	if next == nil {
		next = cur
	}
	if ch := s.cfg.RestartChanges(next); len(ch) > 0 {
		return fmt.Errorf("engine: reload: %s changed, and only certificates (tls cert, key, acme) are applied without a restart; nothing was applied: restart to change them", strings.Join(ch, ", "))
	}
	names := next.ACMENames()
	if len(names) > 0 && s.acme == nil {
		return errors.New("engine: reload: tls.acme is new in this configuration, and ACME starts with the server; restart to apply")
	}
	t, err := loadCertTable(next, s.certs.selfSigned)
	if err != nil {
		return err
	}
	if s.acme != nil {
		if err := s.acme.SetNames(names); err != nil {
			return err
		}
	}
	s.certs.cur.Store(t)
	s.certs.cfg = next
	return nil
}

// ReopenLogs reopens the access log file (after logrotate renamed it).
// engine serve calls it on SIGUSR1, as nginx does.
func (s *Server) ReopenLogs() error { return s.alog.Reopen() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := s.counters()
	st.DigestsKnown, st.CacheEntries = s.digests.Cache().Len(), s.cache.Len()
	return st
}

// counters is Stats without the two cache sizes, which are read under
// the caches' locks (a reactor takes the digest cache's when it asks for
// a digest): what /metrics reads at every scrape, atomics only.
func (s *Server) counters() Stats {
	t := s.tlsTotals()
	st := Stats{
		Stats:            s.group.Stats(),
		Requests:         s.stats.requests.Load(),
		BadRequests:      s.stats.badRequests.Load(),
		NotFound:         s.stats.notFound.Load(),
		ServerErrors:     s.stats.serverErrors.Load(),
		Bulk:             s.stats.bulk.Load(),
		Redirects:        s.stats.redirects.Load(),
		ACMEChallenges:   s.stats.acmeChallenges.Load(),
		CongestionErrors: s.stats.congestionErrors.Load(),

		TLSHandshakes:      t.Handshakes,
		TLSHandshakeErrors: t.HandshakeErrors,
		TLSRecordErrors:    t.RecordErrors,
		TLSAlertsReceived:  t.AlertsReceived,
		TLSKeyUpdates:      t.KeyUpdates,
		TLSUserBytes:       t.UserBytes,
		TLSUserBatches:     t.UserBatches,
		TLSKernelBytes:     t.KernelBytes,
		Promotions:         t.Promotions,
		PromoteFailures:    t.PromoteFailures,

		H2Connections:  s.stats.h2Conns.Load(),
		H2Streams:      s.stats.h2Streams.Load(),
		H2Resets:       s.stats.h2Resets.Load(),
		H2BodyFailures: s.stats.h2BodyFailures.Load(),
		H2ConnErrors:   s.stats.h2ConnErrors.Load(),
		H2Events:       s.h2Events(),
		H3Streams:      s.stats.h3Streams.Load(),
		H3Resets:       s.stats.h3Resets.Load(),
		H3Stalled:      s.stats.h3Stalled.Load(),

		FilesHashed:        s.digests.Files.Load(),
		HashesJoined:       s.digests.Joined.Load(),
		BytesHashed:        s.digests.Bytes.Load(),
		HashTime:           time.Duration(s.digests.Nanos.Load()),
		ManifestMismatches: s.digests.Mismatches.Load(),
		CacheHits:          s.cache.Hits.Load(),
		CacheMisses:        s.cache.Misses.Load(),
	}
	if p := s.proxy; p != nil {
		st.ProxyOpened, st.ProxyReused, st.ProxyFailed = p.stats.opened.Load(), p.stats.reused.Load(), p.stats.failed.Load()
		st.ProxyRetried, st.ProxyTimeouts, st.ProxyBadResponses = p.stats.retried.Load(), p.stats.timeouts.Load(), p.stats.badResponses.Load()
		st.ProxyDrained, st.ProxyH2Buffered, st.ProxyQueued = p.stats.drained.Load(), p.h2Buffered.Load(), p.stats.queued.Load()
		st.ProxyUnsolicited = p.stats.unsolicited.Load()
	}
	if p := s.pass; p != nil {
		st.PassRelayed, st.PassActive = p.Stats.Relayed.Load(), p.Stats.Active.Load()
		st.PassBytesUp, st.PassBytesDown = p.Stats.BytesUp.Load(), p.Stats.BytesDown.Load()
		st.PassFailures, st.QUICPassFailures = map[string]int64{}, map[string]int64{}
		for i := range p.Stats.Failures {
			if n := p.Stats.Failures[i].Load(); n > 0 {
				st.PassFailures[passthrough.ReasonNames[i]] = n
			}
			if n := p.Stats.QUICFailures[i].Load(); n > 0 {
				st.QUICPassFailures[passthrough.ReasonNames[i]] = n
			}
		}
		st.QUICPassRelayed, st.QUICPassActive = p.Stats.QUICRelayed.Load(), p.Stats.QUICActive.Load()
		st.QUICPassBytesUp, st.QUICPassBytesDown = p.Stats.QUICBytesUp.Load(), p.Stats.QUICBytesDown.Load()
		st.QUICPassDropped, st.QUICPassUnconfirmed = p.Stats.QUICDropped.Load(), p.Stats.QUICUnconfirmed.Load()
		st.QUICPassOneSided = p.Stats.QUICOneSided.Load()
	}
	s.h3Stats(&st)
	return st
}

func (s *Server) h3Stats(st *Stats) {
	if s.h3 == nil {
		return
	}
	h := s.h3.Stats()
	st.H3Connections, st.H3Active, st.H3Refused, st.H3ConnErrors = h.Connections, h.Active, h.Refused, h.ConnErrors
}

func (s *Server) h2Events() map[string]int64 {
	m := map[string]int64{}
	for i := range s.stats.h2Events {
		if n := s.stats.h2Events[i].Load(); n > 0 {
			m[h2.Event(i).String()] = n
		}
	}
	return m
}

// disabled reads a debug kill-switch. These environment variables are
// unstable and exist for diagnosis only: ENGINE_DISABLE_STEERING=1 skips
// the eBPF steering program.
func disabled(name string) bool {
	v := strings.ToLower(getenv(name))
	return v == "1" || v == "true" || v == "yes"
}
