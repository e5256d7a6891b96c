package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/internal/loglimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/net/netutil"
)

// The admin listener's bounds: a scraper or an operator's curl, not the
// public. A CPU profile runs up to its ?seconds= (30 by default), so
// writes may take a while; everything else answers at once.
const (
	adminMaxConns     = 32
	adminHeadTimeout  = 5 * time.Second
	adminReadTimeout  = 10 * time.Second
	adminWriteTimeout = 2 * time.Minute
	adminIdleTimeout  = time.Minute
	adminMaxHeader    = 16 << 10
	adminRefusalLogs  = 5 // lines a second about refused Hosts, at most
)

// admin is the [admin] listener: /metrics, /healthz, /debug/pprof/. It is
// served by net/http on goroutines of its own, never by the reactors; a
// scrape reads the servers' counters and locks nothing a reactor waits on.
type admin struct {
	// Immutable after listenAdmin.
	ln    net.Listener
	srv   *http.Server
	hosts adminHosts
	log   *slog.Logger

	limiter *loglimit.Limiter // refused Hosts
}

// adminHosts are the Host values the admin listener answers. A page in
// the operator's browser can point a name of its own at 127.0.0.1 (DNS
// rebinding) and then read /metrics and /debug/pprof/ as its own origin;
// the Host it sends is still that name. So only names no page can rebind
// pass: IP literals of loopback addresses and "localhost", with any port
// or none, and the listen address itself (as configured and as bound,
// and its host alone when that is an IP literal). A listener on every
// address (allow_remote with 0.0.0.0 or [::]) takes any IP literal: a
// browser sends one only to the address it names. Anything else, an
// empty Host included, gets 403 (as Caddy's admin API does).
type adminHosts struct {
	exact map[string]bool // lowercase Host values besides the loopback ones
	anyIP bool            // the listener is on every address
}

// newAdminHosts allows listen (as configured) and bound (the listener's
// address, which names the port listen left to the kernel).
func newAdminHosts(listen, bound string) adminHosts {
	a := adminHosts{exact: map[string]bool{}}
	for _, hp := range []string{listen, bound} {
		hp = strings.ToLower(hp)
		a.exact[hp] = true
		host, _, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(host)
		switch {
		case host == "":
			a.anyIP = true
		case err != nil:
		case ip.IsUnspecified():
			a.anyIP = true
		case ip.Is6():
			a.exact["["+host+"]"] = true
		default:
			a.exact[host] = true
		}
	}
	return a
}

// allowed reports whether the admin listener answers a request whose
// Host (its authority) is host.
func (a adminHosts) allowed(host string) bool {
	if host == "" {
		return false
	}
	host = strings.ToLower(host)
	if a.exact[host] {
		return true
	}
	name := host
	if h, port, err := net.SplitHostPort(host); err == nil {
		if strings.Trim(port, "0123456789") != "" {
			return false
		}
		name = h
	} else if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		name = host[1 : len(host)-1]
	}
	if name == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(name)
	if err != nil || ip.Zone() != "" {
		return false
	}
	return ip.Unmap().IsLoopback() || a.anyIP
}

// guard answers 403 to a request whose Host the listener does not answer
// (adminHosts), before next sees it.
func (a *admin) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.hosts.allowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		a.limiter.Note("admin: request refused: its Host is not a loopback address, localhost or the listen address",
			"peer", r.RemoteAddr, "host", r.Host, "path", r.URL.Path)
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "forbidden: this Host is not served here\n")
	})
}

// listenAdmin binds [admin] listen.
func (s *Server) listenAdmin() error {
	a := &s.cfg.Admin
	if a.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.Listen)
	if err != nil {
		return &config.Error{File: s.cfg.File(), Line: s.cfg.Line("admin.listen"), Key: "admin.listen", Msg: err.Error()}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry(), promhttp.HandlerOpts{
		ErrorLog: slogPrinter{s},
		// A scrape is 20-odd KiB: gzip would cost more CPU than the
		// bytes are worth on the networks an admin port is reached over.
		DisableCompression:  true,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /healthz", s.healthz)
	if a.PProf {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "engine admin: /metrics (Prometheus), /healthz")
		if a.PProf {
			fmt.Fprintln(w, "/debug/pprof/")
		}
	})
	s.admin = &admin{
		ln:      netutil.LimitListener(ln, adminMaxConns),
		hosts:   newAdminHosts(a.Listen, ln.Addr().String()),
		log:     s.log,
		limiter: loglimit.New(s.log, adminRefusalLogs),
	}
	s.admin.srv = &http.Server{
		Handler:           s.admin.guard(mux),
		ReadHeaderTimeout: adminHeadTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeader,
		ErrorLog:          nil,
	}
	return nil
}

// registry holds the engine's collector and Go's and the process's.
func (s *Server) registry() *prometheus.Registry {
	s.regOnce.Do(func() {
		s.reg = prometheus.NewRegistry()
		// Not the library's process collector: it reads six files under
		// /proc at each scrape, most of a scrape's cost; the engine
		// reports its CPU and start time itself (collector.go).
		s.reg.MustRegister(newCollector(s), collectors.NewGoCollector())
	})
	return s.reg
}

// WriteMetrics writes what /metrics serves, in the Prometheus text
// format: for tests, and for a server stopped whose listener is gone.
func (s *Server) WriteMetrics(w io.Writer) error {
	fams, err := s.registry().Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// AdminAddr returns the address of the [admin] listener, or "" without
// one.
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.ln.Addr().String()
}

func (a *admin) serve(s *Server) {
	if a == nil {
		return
	}
	s.log.Info("admin listener", "addr", a.ln.Addr().String(), "pprof", s.cfg.Admin.PProf)
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("admin listener stopped", "err", err)
	}
}

// close stops the admin listener; a scrape under way gets a second.
func (a *admin) close() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.srv.Shutdown(ctx) != nil {
		a.srv.Close()
	}
	a.ln.Close() // when Serve never ran
}

// healthz answers 200 while the server accepts (listeners bound,
// preflight passed: New succeeded, Run started), 503 before and once
// shutdown begins, so a load balancer stops sending new clients.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch s.health.Load() {
	case healthServing:
		fmt.Fprintln(w, "ok")
	case healthDraining:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "shutting down")
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "starting")
	}
}

// The server's health as /healthz reports it.
const (
	healthStarting = iota
	healthServing
	healthDraining
)

// slogPrinter gives promhttp's error log to the server's logger.
type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) { p.s.log.Error("metrics: " + fmt.Sprint(v...)) }
