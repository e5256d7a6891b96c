package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mediaship/engine/engine/proxy"
	"github.com/mediaship/engine/internal/peershare"
	"github.com/mediaship/engine/internal/reuseport"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/acme"
	"github.com/mediaship/engine/engine/admin"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/digests"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/passthrough"
	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/wtpage"
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
	peers   *peershare.Table // connections per client address: TCP (every listener) and QUIC
	alog    *accesslog.Log
	limits  h1.Limits
	h3      *h3.Server              // nil when no site serves HTTP/3
	wt      *wt.Server              // [webtransport] sessions; nil unless enabled
	wtPage  *wtpage.Page            // the diagnostics page; nil unless [webtransport] serves it
	proxy   *proxy.Table            // nil without reverse proxy routes that terminate TLS
	secrets *policy.Secrets         // what signed URLs and credentials are checked against
	pass    *passthrough.Table      // nil without passthrough routes
	edge    edgeRun                 // the edge cache's fetches and relays
	quic    *passthrough.Router     // QUIC passthrough; nil without it
	quicUDP *net.UDPConn            // its socket when the engine serves no HTTP/3 itself
	qsteer  *reuseport.QUICSteering // the UDP sockets' steering by generation; nil without eBPF
	quicGen uint8                   // this server's generation in it (0 without steering)
	redir   *reactor.Group          // the [redirect_http] listener; nil without it

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
	in      *Sockets        // during New: the sockets it may take
	handed  atomic.Bool     // Handover gave the sockets to a successor
	serving chan struct{}   // closed once Run serves
	regOnce sync.Once
	reg     *prometheus.Registry // registry() makes it
	health  atomic.Int32         // healthStarting, healthServing, healthDraining

	stats serverCounters
	// refusals counts requests a policy refused, by [site][reason]
	// (policy.Reasons; sites as the metrics index them).
	refusals []atomic.Int64
}

// serverCounters are the data path's atomics; each is named as the
// Stats field it fills (loadCounters).
type serverCounters struct {
	Requests, BadRequests, NotFound, ServerErrors, Bulk, CongestionErrors atomic.Int64
	Redirects, ACMEChallenges                                             atomic.Int64

	H2Connections, H2Streams, H2Resets, H2ConnErrors, H2BodyFailures atomic.Int64
	h2Events                                                         [h2.EventHeaderTimeout + 1]atomic.Int64

	H3Streams, H3Resets, H3Stalled atomic.Int64
	h3Bytes                        atomic.Int64

	// The edge cache (cached proxy routes).
	EdgeHits, EdgeMisses, EdgeStored, EdgeIntegrityFailures, EdgeOriginBytes, EdgeCollapsed atomic.Int64
	EdgeRevalidated, EdgeStale, EdgePasses, EdgeClientBytes, EdgeFillsBusy                  atomic.Int64
}

// Stats is a snapshot of the server's counters. Each counter is
// declared here once: a field's metric tag names it on /metrics ("name"
// for a counter, "name,gauge" for a gauge), its help tag says what it
// counts, and its when tag leaves it out of a server without the
// capability ("proxy", "pass", "cache"); the collector exports every tagged field
// (stats.go). Fields without a metric tag are exported in labelled
// families or not at all.
type Stats struct {
	reactor.Stats
	Requests         int64 // responses queued
	BadRequests      int64 // requests refused as malformed (4xx from the parser)
	NotFound         int64
	ServerErrors     int64 // 5xx answers
	Bulk             int64 `metric:"bulk_responses_total" help:"Responses that took the bulk path (congestion control switched to bulk_congestion)."` // responses that took the bulk path
	CongestionErrors int64 `metric:"bulk_congestion_errors_total" help:"Bulk responses whose congestion control could not be set."`                   // bulk responses whose congestion control could not be set
	Redirects        int64 `metric:"redirects_total" help:"308s to https:// from [redirect_http]."`                                                   // 308s to https:// from the [redirect_http] listener
	ACMEChallenges   int64 `metric:"acme_challenges_total" help:"ACME validations answered."`                                                         // ACME validations answered: tls-alpn-01 handshakes begun, http-01 key authorizations sent
	CacheEntries     int
	CacheHits        int64 `metric:"open_file_cache_hits_total" help:"Requests answered from the open-file cache."`
	CacheMisses      int64 `metric:"open_file_cache_misses_total" help:"Requests that opened a file on a worker."`

	TLSHandshakes      int64 // completed
	TLSHandshakeErrors int64 // failed, or not TLS at all
	TLSRecordErrors    int64 `metric:"tls_record_errors_total" help:"TLS connections closed for a bad record or an unexpected message."` // bad records, unexpected messages: each closed its connection
	TLSAlertsReceived  int64 `metric:"tls_alerts_received_total" help:"Fatal TLS alerts received from clients."`                         // fatal alerts from clients
	TLSKeyUpdates      int64 // KeyUpdate messages from clients
	TLSUserBytes       int64 // response bytes sealed in userspace
	TLSUserBatches     int64 // batches they were sealed in (one write each)
	TLSKernelBytes     int64 // response bytes handed to kernel TLS
	Promotions         int64 `metric:"ktls_promotions_total" help:"Connections whose transmission moved to kernel TLS."`                                 // connections whose transmission moved to the kernel
	PromoteFailures    int64 `metric:"ktls_promotion_failures_total" help:"Promotions to kernel TLS that failed (the connection went on in userspace)."` // promotions that failed (the connection stayed in userspace)

	H2Connections  int64 `metric:"h2_connections_total" help:"HTTP/2 connections."`                            // HTTP/2 connections (ALPN h2 or h2c prior knowledge)
	H2Streams      int64 `metric:"h2_streams_total" help:"HTTP/2 responses."`                                  // HTTP/2 responses queued
	H2Resets       int64 `metric:"h2_resets_total" help:"HTTP/2 streams reset before their response was out."` // HTTP/2 streams reset before their response was out
	H2BodyFailures int64 // HTTP/2 streams reset because their file shrank under them
	H2ConnErrors   int64 // HTTP/2 connections ended by GOAWAY with an error
	// H2Events counts HTTP/2 limits hit and protocol errors by kind
	// (h2.Event).
	H2Events map[string]int64

	H3Connections int64 `metric:"h3_connections_total" help:"HTTP/3 connections accepted."`                       // HTTP/3 connections accepted
	H3Active      int64 `metric:"h3_open_connections,gauge" help:"HTTP/3 connections open now."`                  // HTTP/3 connections open now
	H3Refused     int64 `metric:"h3_refused_total" help:"HTTP/3 connection attempts refused at max_connections."` // HTTP/3 connection attempts (Initial packets) refused at max_connections
	// The fair share on QUIC (h3/share.go): attempts refused at their
	// address's share, connections closed to admit new ones (idle, or
	// slower than min_send_rate), new clients asked for a Retry first.
	H3RefusedAddress, H3ReclaimedIdle, H3ReclaimedSlow, H3ReclaimedShare int64
	H3Retries                                                            int64 `metric:"quic_retries_total" help:"QUIC connection attempts answered with a Retry (under pressure, or from an address holding half its share): a client proves its address before its connection takes a slot."`
	H3Streams                                                            int64 `metric:"h3_streams_total" help:"HTTP/3 responses."`                                           // HTTP/3 responses
	H3Resets                                                             int64 `metric:"h3_resets_total" help:"HTTP/3 responses the client reset or abandoned."`              // HTTP/3 responses the client reset or abandoned
	H3Stalled                                                            int64 `metric:"h3_stalled_total" help:"HTTP/3 responses reset after send_timeout without progress."` // HTTP/3 responses reset after send_timeout without progress
	// H3ConnErrors counts HTTP/3 connections closed with an error, by
	// side and code ("local H3_FRAME_UNEXPECTED").
	H3ConnErrors map[string]int64

	FilesHashed        int64         `metric:"digests_computed_total" help:"BLAKE3 digests computed."` // digests computed in the background
	HashesJoined       int64         // hash requests that joined hashing already under way for the same content
	BytesHashed        int64         `metric:"digest_bytes_total" help:"Bytes hashed."`                     // bytes they covered
	HashTime           time.Duration `metric:"digest_seconds_total" help:"Time the hashing workers spent."` // time the hashing workers spent (CPU-bound: about their CPU time)
	ManifestMismatches int64         // files whose bytes contradicted the manifest
	DigestsKnown       int           // digests in the cache
	DigestCacheHits    int64         `metric:"digest_cache_hits_total" help:"BLAKE3 digests found in the digest cache when a file was opened."`
	DigestCacheMisses  int64         `metric:"digest_cache_misses_total" help:"Files opened whose digest the cache did not know."`
	DigestBacklog      int64         `metric:"digest_backlog,gauge" help:"Files waiting for a hashing worker."`

	AccessLogLines   int64 `metric:"access_log_lines_total" help:"Access log lines written."`
	AccessLogDropped int64 `metric:"access_log_dropped_lines_total" help:"Access log lines dropped: the disk fell behind by access_log_buffer, or a write failed."`

	// The reverse proxy's upstream connections.
	ProxyOpened       int64 `metric:"upstream_connections_opened_total" help:"Connections opened to upstreams." when:"proxy"`                                          // connections opened to upstreams
	ProxyReused       int64 `metric:"upstream_connections_reused_total" help:"Proxied requests sent on a pooled connection." when:"proxy"`                             // requests sent on a pooled connection
	ProxyFailed       int64 `metric:"upstream_connect_failures_total" help:"Upstream connections that failed (refused, connect timeout)." when:"proxy"`                // connections that failed (refused, connect timeout): the upstream backs off
	ProxyRetried      int64 `metric:"upstream_retries_total" help:"Idempotent requests sent again after a pooled connection closed under them." when:"proxy"`          // idempotent requests sent again after a pooled connection closed under them
	ProxyTimeouts     int64 `metric:"upstream_timeouts_total" help:"Upstream response or send timeouts (504)." when:"proxy"`                                           // response_timeout or send timeouts to upstreams (504)
	ProxyBadResponses int64 `metric:"upstream_bad_responses_total" help:"Upstream responses that could not be relayed (502, or a reset mid-body)." when:"proxy"`       // upstream responses the proxy could not relay (502, or a reset mid-body)
	ProxyDrained      int64 `metric:"upstream_drained_total" help:"Upstream responses read and dropped after their client left, to keep the connection." when:"proxy"` // responses read and dropped after their client went away, to keep the connection
	ProxyH2Buffered   int64 `metric:"upstream_h2_buffered_bytes,gauge" help:"Proxied response bytes HTTP/2 streams hold ahead of their clients." when:"proxy"`         // proxied response bytes HTTP/2 streams hold ahead of their clients, now
	ProxyQueued       int64 `metric:"upstream_queued_total" help:"Proxied requests that waited for a connection (max_conns)." when:"proxy"`                            // requests that waited for a connection (max_conns)
	// ProxyUnsolicited counts upstream connections closed, not reused,
	// because their upstream sent bytes no request asked for (behind a
	// response, while idle, or found when taken from the pool): they
	// would have been read as the next request's response.
	ProxyUnsolicited int64 `metric:"upstream_unsolicited_total" help:"Upstream connections closed, not reused, for bytes no request asked for (an upstream answering twice)." when:"proxy"`
	// ProxyPreempted counts proxied responses reset because their client
	// took nothing for 5 s while another request waited for their
	// upstream connection.
	ProxyPreempted int64 `metric:"upstream_preempted_total" help:"Proxied responses reset because their client took no bytes for 5s while another request waited for their upstream connection (max_conns)." when:"proxy"`

	// The edge cache: requests of cached routes answered from it and
	// sent to the origin, objects stored, fills whose bytes did not match
	// the origin's digest, bytes taken from origins into the cache, and
	// the store's objects, bytes and evictions.
	EdgeHits              int64 `metric:"cache_hits_total" help:"Requests of cached routes answered from the edge cache." when:"cache"`
	EdgeMisses            int64 `metric:"cache_misses_total" help:"Requests of cached routes sent to the origin (not in the cache, stale, or not cacheable)." when:"cache"`
	EdgeStored            int64 `metric:"cache_stored_total" help:"Objects stored in the edge cache." when:"cache"`
	EdgeIntegrityFailures int64 `metric:"cache_integrity_failures_total" help:"Origin responses whose bytes did not match the digest the origin stated: never stored." when:"cache"`
	EdgeOriginBytes       int64 `metric:"cache_origin_bytes_total" help:"Bytes taken from origins into the edge cache." when:"cache"`
	EdgeFillsBusy         int64 `metric:"cache_fills_busy_total" help:"Misses relayed to the origin and not stored because max_fills objects were being fetched already." when:"cache"`
	EdgeClientBytes       int64 `metric:"cache_client_bytes_total" help:"Bytes the edge cache gave clients of cached routes: hits' bodies (as answered: a client that leaves early counts them all) and the responses of misses as written." when:"cache"`
	EdgeCollapsed         int64 `metric:"cache_collapsed_total" help:"Misses answered from another request's fetch of the same object, as it lands." when:"cache"`
	EdgeRevalidated       int64 `metric:"cache_revalidated_total" help:"Stale objects the origin said were unchanged (304): fresh again without their bytes." when:"cache"`
	EdgeStale             int64 `metric:"cache_stale_served_total" help:"Stale objects served: while revalidated (stale-while-revalidate) or after the origin failed (stale-if-error)." when:"cache"`
	EdgePasses            int64 `metric:"cache_passes_total" help:"Requests of cached routes relayed to the origin one by one: not cacheable, a range ahead of its object's fetch, no room, an S3 origin's HEAD." when:"cache"`
	EdgeObjects           int64 `metric:"cache_objects,gauge" help:"Objects in the edge cache." when:"cache"`
	EdgeBytes             int64 `metric:"cache_bytes,gauge" help:"Bytes of the objects in the edge cache." when:"cache"`
	EdgeEvictions         int64 `metric:"cache_evictions_total" help:"Objects removed from the edge cache to keep max_size or min_free." when:"cache"`

	// TLS passthrough (routes with tls_termination = false).
	PassRelayed   int64 `metric:"passthrough_relayed_total" help:"TCP connections relayed by TLS passthrough." when:"pass"`                 // TCP connections relayed to an upstream
	PassActive    int64 `metric:"passthrough_open,gauge" help:"TCP passthrough relays open now." when:"pass"`                               // TCP relays open now
	PassBytesUp   int64 `metric:"passthrough_bytes_up_total" help:"Bytes relayed from clients to upstreams (closed relays)." when:"pass"`   // bytes relayed from clients to upstreams (closed relays)
	PassBytesDown int64 `metric:"passthrough_bytes_down_total" help:"Bytes relayed from upstreams to clients (closed relays)." when:"pass"` // bytes relayed from upstreams to clients (closed relays)
	// PassFailures counts connections not relayed, by reason: no_sni,
	// no_route, not_tls, bad_hello, hello_timeout, upstream_unreachable.
	PassFailures map[string]int64
	// QUIC passthrough: flows relayed and open now, datagram bytes each
	// way, datagrams dropped because the engine serves no HTTP/3 of its
	// own, and ClientHellos not relayed by reason (those above, and
	// table_full; a client's retransmitted Initial counts again).
	QUICPassRelayed                    int64 `metric:"quic_passthrough_relayed_total" help:"QUIC flows relayed." when:"pass"`
	QUICPassActive                     int64 `metric:"quic_passthrough_open,gauge" help:"QUIC flows relayed now." when:"pass"`
	QUICPassBytesUp, QUICPassBytesDown int64
	QUICPassDropped                    int64
	QUICPassUnconfirmed                int64 `metric:"quic_passthrough_unconfirmed_total" help:"QUIC flows closed because their client never answered the upstream (header_timeout) or never finished its handshake (15 s), or for a new flow at max_connections." when:"pass"` // flows dropped because the client never answered the upstream (after header_timeout, at most 10 s) or never finished its handshake (15 s)
	QUICPassOneSided                   int64 `metric:"quic_passthrough_one_sided_total" help:"QUIC flows closed because their upstream had said nothing for a while as their client kept sending." when:"pass"`                                                                 // flows closed because their upstream had said nothing for a while as their client kept sending (for a new flow at max_connections after 1 s, otherwise after 15 s)
	QUICPassFailures                   map[string]int64
}

// New probes the kernel features cfg requires (refusing to go on, before
// any socket is bound, when one is missing), opens the site roots and binds
// the listeners. Requests are served once Run is called. cfg must have
// passed Validate.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) { return NewFrom(cfg, log, nil) }

// NewFrom is New on the listening sockets in (a predecessor's, or
// systemd's) where they serve what cfg listens on, binding the others.
// It owns in: what it does not use it closes, naming it in the log.
func NewFrom(cfg *config.Config, log *slog.Logger, in *Sockets) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	defer in.leftOver(log)
	s := &Server{cfg: cfg, log: log, prober: &preflight.Prober{}, in: in, serving: make(chan struct{})}
	defer func() { s.in = nil }()
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
	if s.proxy, err = proxy.New(cfg); err != nil {
		return nil, err
	}
	if s.pass, err = passthrough.New(cfg); err != nil {
		return nil, err
	}
	if s.sites, err = newSiteTable(cfg); err != nil {
		return nil, err
	}
	s.edge.ctx, s.edge.cancel = context.WithCancel(context.Background())
	var paths []*policy.Path
	for _, st := range s.sites.all {
		paths = append(paths, st.policy.Paths()...)
	}
	if s.proxy != nil {
		paths = append(paths, s.proxy.Policies...)
	}
	if s.secrets, err = policy.NewSecrets(cfg.Signing.Keys, paths); err != nil {
		s.sites.close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	s.refusals = make([]atomic.Int64, (len(s.sites.all)+2)*len(policy.Reasons))
	if s.alog, err = accesslog.Open(cfg.AccessLog, cfg.AccessLogFormat, int(cfg.AccessLogBuffer), log); err != nil {
		s.sites.close()
		return nil, err
	}
	if s.digests, err = digests.New(cfg, s.sites.roots, log); err != nil {
		s.sites.close()
		s.alog.Close()
		return nil, err
	}
	s.cache = files.NewCache(files.Config{Logger: log, KnownDigest: s.digests.Known, Outboards: s.digests.Trees()})
	// A share as large as max_connections limits nothing: an address
	// then holds every slot only as any connections do, and at the limit
	// max_connections' own reclaiming decides.
	perAddr := cfg.Limits.MaxConnectionsPerAddress
	if perAddr >= cfg.Limits.MaxConnections {
		perAddr = 0
	}
	s.peers = peershare.New(perAddr, cfg.Limits.AddressIPv6Prefix, cfg.ReverseProxy.Trusted)
	if s.proxy != nil {
		s.proxy.Clients = s.peers
	}
	rc := reactor.Config{
		Addr:       cfg.Listen,
		Workers:    cfg.Workers,
		MaxConns:   cfg.Limits.MaxConnections,
		PerAddress: s.peers,
		MinRate:    int64(cfg.Limits.MinSendRate),
		RateWindow: cfg.Limits.MinSendRateWindow.D(),
		// Room for a request head, and for a whole HTTP/2 frame.
		ReadBuffer:  max(int(cfg.Limits.MaxHeaderBytes)+4<<10, 20<<10),
		SendTimeout: cfg.Limits.SendTimeout.D(),
		NewHandler:  func(l *reactor.Loop) reactor.Handler { return newConnHandler(s, l, false) },
		Logger:      log,
		NoSteering:  disabled("ENGINE_DISABLE_STEERING"),
		Pin:         cfg.PinWorkers,
	}
	if rc.Inherit, err = in.takeTCP("listen", cfg.Listen); err != nil {
		s.closeAll()
		return nil, err
	}
	rc.Steering = adoptSteering(in.takeSteering(), len(rc.Inherit), cfg.WorkerCount(), log)
	// With port 0 the kernel picks the TCP port, and HTTP/3 needs the
	// same number free on UDP, which another socket may hold: pick again
	// (not on sockets handed over: their port is the port).
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
		if !errors.Is(err, syscall.EADDRINUSE) || !anyPort(cfg.Listen) || try == 4 || rc.Inherit != nil {
			break
		}
	}
	if err == nil && cfg.RedirectHTTP.Listen != "" {
		rc.Addr, rc.Workers, rc.NoSteering, rc.Pin, rc.Steering = cfg.RedirectHTTP.Listen, 1, true, false, nil
		if rc.Inherit, err = in.takeTCP("redirect_http", cfg.RedirectHTTP.Listen); err != nil {
			rc.Inherit = nil
		}
	}
	if err == nil && cfg.RedirectHTTP.Listen != "" {
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
		s.closeAll()
		return nil, err
	}
	return s, nil
}

// closeAll releases what New opened before binding failed.
func (s *Server) closeAll() {
	if s.qsteer != nil {
		s.qsteer.Close()
	}
	s.cache.Close()
	s.digests.Close()
	s.sites.close()
	s.alog.Close()
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

// Serving is closed once Run serves: its loops run and /healthz says so.
func (s *Server) Serving() <-chan struct{} { return s.serving }

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
	if s.qsteer != nil {
		if s.h3 != nil {
			// Not before HTTP/3 accepts: the predecessor's clients,
			// told to go away, come back all at once.
			select {
			case <-s.h3.Accepting():
			case <-time.After(time.Second):
			}
		}
		// New QUIC connections come here from now on; the
		// predecessor's keep reaching it.
		if err := s.qsteer.SetCurrent(s.quicGen); err != nil {
			s.log.Error("HTTP/3: new connections could not be steered to this server", "err", err)
		}
	}
	s.health.Store(healthServing)
	close(s.serving)
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		s.health.Store(healthDraining)
		if s.handed.Load() {
			// The successor answers on every listening socket now
			// (stopAccepting), the admin address too.
			s.log.Info("handed over to a successor; draining", "grace", s.cfg.ShutdownGrace.String())
		} else {
			s.log.Info("shutting down", "grace", s.cfg.ShutdownGrace.String())
		}
		var sctx context.Context
		var cancel context.CancelFunc
		if s.cfg.ShutdownGrace.UntilDone {
			// No deadline of its own: each connection's timeouts end
			// the ones that stall.
			sctx, cancel = context.WithCancel(context.Background())
		} else {
			sctx, cancel = context.WithTimeout(context.Background(), s.cfg.ShutdownGrace.D())
		}
		h3err := make(chan error, 1)
		go func() {
			if s.h3 == nil {
				h3err <- nil
				return
			}
			if s.handed.Load() && s.qsteer != nil {
				// Handshakes that began here before the successor took
				// new connections finish here (their packets are steered
				// here by ID): closing the QUIC listener now would refuse
				// them (CONNECTION_REFUSED). They get GOAWAY with the rest.
				s.handshakesDone(sctx)
			}
			s.h3.OnDrained(s.relaysDone)
			h3err <- s.h3.Shutdown(sctx)
		}()
		if s.redir != nil {
			go s.redir.Shutdown(sctx)
		}
		serr := s.group.Shutdown(sctx)
		if herr := <-h3err; serr == nil {
			serr = herr
		}
		if s.h3 == nil {
			s.relaysDone(sctx) // QUIC passthrough on a socket of its own
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
	if s.quic != nil {
		// Beside HTTP/3 too, where it reads through quic-go: its sweeper
		// and flows end here, each flow with its access log line.
		s.quic.Close()
	}
	if s.quicUDP != nil {
		s.quicUDP.Close()
	}
	<-h3done
	if s.qsteer != nil {
		s.qsteer.Close() // this process's hold; the socket left the group as it closed
	}
	close(stopSaving)
	s.health.Store(healthDraining)
	if s.admin != nil {
		s.admin.Close()
	}
	s.logTotals()
	s.digests.Close()
	s.cache.Close()
	s.edge.stop()
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
			s.stats.ACMEChallenges.Add(1)
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
// output met the sockets, how TLS was sealed, and what passthrough
// relayed. These are the reactor's
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
		"tls_bytes_per_batch", per(st.TLSUserBytes, st.TLSUserBatches), "tls_kernel_bytes", st.TLSKernelBytes,
		// Relayed bytes move by splice and over the relays' own UDP
		// sockets, never through the writes counted above.
		"relays", st.PassRelayed+st.QUICPassRelayed,
		"relayed_bytes", st.PassBytesUp+st.PassBytesDown+st.QUICPassBytesUp+st.QUICPassBytesDown)
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
	if name := serverName(sni); s.proxy != nil && s.proxy.Rank(name) > s.sites.rank(name) {
		// A route's domain names it more specifically than any site's
		// (decide's rule): what the proxy answers. At a tie, the site's.
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

// Handover duplicates every listening socket of the server (TCP, UDP,
// redirect_http and admin) and its eBPF steering program, for a
// successor: NewFrom in this process (a reload) or in a new one (a
// binary upgrade). The server goes on accepting until its Run's context
// ends; it then stops watching the sockets, closes its admin listener at
// once, and drains, while the sockets live on in the successor with the
// connections queued on them.
func (s *Server) Handover() (*Sockets, error) {
	out := &Sockets{}
	fail := func(err error) (*Sockets, error) {
		out.Close()
		return nil, fmt.Errorf("engine: handover: %w", err)
	}
	fds, st, err := s.group.Handover()
	if err != nil {
		return fail(err)
	}
	for _, fd := range fds {
		out.addFd("listen", fd)
	}
	if st != nil {
		fs, err := st.Files()
		if err != nil {
			return fail(err)
		}
		for _, f := range fs {
			out.files = append(out.files, f)
		}
	}
	var udp *os.File
	switch {
	case s.qsteer != nil:
		// The successor opens a socket of its own in the group.
		fs, err := s.qsteer.Files()
		if err != nil {
			return fail(err)
		}
		out.files = append(out.files, fs...)
	case s.h3 != nil:
		udp, err = s.h3.Handover()
	case s.quicUDP != nil:
		udp, err = s.quicUDP.File()
	}
	if err != nil {
		return fail(err)
	}
	if udp != nil {
		err = out.addFile("listen", udp)
	}
	if err == nil && s.redir != nil {
		fds, _, err = s.redir.Handover()
		for _, fd := range fds {
			out.addFd("redirect_http", fd)
		}
	}
	if err == nil && s.admin != nil {
		var f *os.File
		if f, err = s.admin.Handover(); err == nil {
			err = out.addFile("admin", f)
		}
	}
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// quicHandoverGrace is how long a server that handed over keeps its QUIC
// listener open at least, for Initials the kernel queued for it before
// the successor took new connections.
const quicHandoverGrace = time.Second

// handshakesDone waits, once this server handed over, until the QUIC
// handshakes under way here have ended (at least quicHandoverGrace, at
// most until quic-go's own handshake timeout would have ended them, or
// until ctx ends). A fixed 2 s was not enough for a handshake whose
// packets were lost and sent again on a loaded machine: closing the
// listener refused it (CONNECTION_REFUSED, seen in bench/lifecycle).
func (s *Server) handshakesDone(ctx context.Context) {
	if left := s.h3.HandshakesDone(ctx, quicHandoverGrace); left > 0 && ctx.Err() == nil {
		s.log.Warn("HTTP/3: handshakes still under way after the handshake timeout; closing the draining QUIC listener refuses them", "handshakes", left)
	}
}

// stopAccepting ends this server's accepting once a successor holds its
// sockets: the loops of both listeners stop watching theirs, and the
// admin listener closes. Connections open here go on.
func (s *Server) stopAccepting() {
	s.group.StopAccepting(5 * time.Second)
	if s.redir != nil {
		s.redir.StopAccepting(5 * time.Second)
	}
	if s.admin != nil {
		s.admin.Close()
	}
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
	if err := s.reloadCerts(next); err != nil {
		return err
	}
	// The signing keys and the credentials files are read again; the
	// configuration that names them has not changed (reloadCerts
	// refused that).
	if err := s.secrets.Reload(); err != nil {
		return fmt.Errorf("engine: reload: %w; the signing keys and credentials in use are kept", err)
	}
	return nil
}

func (s *Server) reloadCerts(next *config.Config) error {
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

// disabled reads a debug kill-switch. These environment variables are
// unstable and exist for diagnosis only: ENGINE_DISABLE_STEERING=1 skips
// the eBPF steering program.
func disabled(name string) bool {
	v := strings.ToLower(getenv(name))
	return v == "1" || v == "true" || v == "yes"
}
