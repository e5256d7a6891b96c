package admin

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
	"os"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/mediaship/engine/internal/loglimit"
)

// The admin listener's bounds: a scraper or an operator's curl, not the
// public. A CPU profile runs up to its ?seconds= (30 by default), so
// writes may take a while; everything else answers at once.
const (
	maxConns     = 32
	headTimeout  = 5 * time.Second
	readTimeout  = 10 * time.Second
	writeTimeout = 2 * time.Minute
	idleTimeout  = time.Minute
	maxHeader    = 16 << 10
	refusalLogs  = 5 // lines a second about refused Hosts, at most
)

// Listener is the [admin] listener: /metrics, /healthz, /debug/pprof/.
// It is served by net/http on goroutines of its own, never by the
// reactors; a scrape reads the servers' counters and locks nothing a
// reactor waits on.
type Listener struct {
	// Immutable after Listen.
	raw   net.Listener // the socket, for Handover
	ln    net.Listener
	srv   *http.Server
	hosts hosts
	log   *slog.Logger
	pprof bool

	limiter *loglimit.Limiter // refused Hosts
}

// Listen binds listen (or serves ln, a listener handed over, when it is
// not nil) and serves metrics at /metrics, health at /healthz, the
// process ID at /pid (for engine reload and engine upgrade), with
// withPProf Go's profiles at /debug/pprof/, and with purge (not nil) the
// edge cache's purge at POST /cache/purge.
func Listen(listen string, ln net.Listener, withPProf bool, metrics, health, purge http.Handler, log *slog.Logger) (*Listener, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", listen); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.Handle("GET /healthz", health)
	mux.HandleFunc("GET /pid", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, os.Getpid())
	})
	if purge != nil {
		mux.Handle("POST /cache/purge", purge)
	}
	if withPProf {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "engine admin: /metrics (Prometheus), /healthz, /pid")
		if purge != nil {
			fmt.Fprintln(w, "POST /cache/purge?url=URL[&prefix=true]")
		}
		if withPProf {
			fmt.Fprintln(w, "/debug/pprof/")
		}
	})
	a := &Listener{
		raw:     ln,
		ln:      netutil.LimitListener(ln, maxConns),
		hosts:   newHosts(listen, ln.Addr().String()),
		log:     log,
		pprof:   withPProf,
		limiter: loglimit.New(log, refusalLogs),
	}
	a.srv = &http.Server{
		Handler:           a.guard(mux),
		ReadHeaderTimeout: headTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeader,
	}
	return a, nil
}

// Handover returns a duplicate of the listening socket, for a successor
// (a reload, a binary upgrade) to serve.
func (a *Listener) Handover() (*os.File, error) {
	f, ok := a.raw.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, errors.New("admin: the listener cannot be handed over")
	}
	return f.File()
}

// Addr is the address the listener is bound to.
func (a *Listener) Addr() string { return a.ln.Addr().String() }

// hosts are the Host values the admin listener answers. A page in
// the operator's browser can point a name of its own at 127.0.0.1 (DNS
// rebinding) and then read /metrics and /debug/pprof/ as its own origin;
// the Host it sends is still that name. So only names no page can rebind
// pass: IP literals of loopback addresses and "localhost", with any port
// or none, and the listen address itself (as configured and as bound,
// and its host alone when that is an IP literal). A listener on every
// address (allow_remote with 0.0.0.0 or [::]) takes any IP literal: a
// browser sends one only to the address it names. Anything else, an
// empty Host included, gets 403 (as Caddy's admin API does).
type hosts struct {
	exact map[string]bool // lowercase Host values besides the loopback ones
	anyIP bool            // the listener is on every address
}

// newHosts allows listen (as configured) and bound (the listener's
// address, which names the port listen left to the kernel).
func newHosts(listen, bound string) hosts {
	a := hosts{exact: map[string]bool{}}
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
func (a hosts) allowed(host string) bool {
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
func (a *Listener) guard(next http.Handler) http.Handler {
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

// Serve answers until Close.
func (a *Listener) Serve() {
	if a == nil {
		return
	}
	a.log.Info("admin listener", "addr", a.ln.Addr().String(), "pprof", a.pprof)
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("admin listener stopped", "err", err)
	}
}

// Close stops the admin listener; a scrape under way gets a second.
func (a *Listener) Close() {
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
