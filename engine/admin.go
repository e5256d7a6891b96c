package engine

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/mediaship/engine/engine/admin"
	"github.com/mediaship/engine/engine/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// listenAdmin binds [admin] listen.
func (s *Server) listenAdmin() error {
	a := &s.cfg.Admin
	if a.Listen == "" {
		return nil
	}
	metrics := promhttp.HandlerFor(s.registry(), promhttp.HandlerOpts{
		ErrorLog: slogPrinter{s},
		// A scrape is 20-odd KiB: gzip would cost more CPU than the
		// bytes are worth on the networks an admin port is reached over.
		DisableCompression:  true,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
	var ln net.Listener
	if fs := s.in.take("admin", a.Listen, syscall.SOCK_STREAM); len(fs) > 0 {
		for _, f := range fs[1:] {
			f.Close()
		}
		var err error
		ln, err = net.FileListener(fs[0])
		fs[0].Close()
		if err != nil {
			return fmt.Errorf("engine: the admin socket handed over: %w", err)
		}
	}
	l, err := admin.Listen(a.Listen, ln, a.PProf, metrics, http.HandlerFunc(s.healthz), s.purgeHandler(), s.log)
	if err != nil {
		return &config.Error{File: s.cfg.File(), Line: s.cfg.Line("admin.listen"), Key: "admin.listen", Msg: err.Error()}
	}
	s.admin = l
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
	return s.admin.Addr()
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
