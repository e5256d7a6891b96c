package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/integrity"
)

// edgeOrigin is the edge cache's client of one cached route's origin.
// The cache's fetches (edgeFetch) and the requests it relays one by one
// (edgePass) run on goroutines of their own, never on a loop, through
// Go's HTTP client: connections pooled per upstream, TLS as the route
// says, the route's timeouts (connect_timeout for the connection and its
// handshake, response_timeout for the head, read_timeout between two
// reads of the body). An S3 origin's requests are signed (AWS Signature
// V4, minio-go's signer).
type edgeOrigin struct {
	r        *routing.Route
	client   *http.Client
	s3       *credentials.Credentials    // nil: the upstreams are web servers
	manifest map[string]integrity.Digest // cache_manifest, by path without its leading slash
}

// edgeRun is the edge cache's goroutines (fetches and relays): the
// server's end cancels them and waits for them (edgeStopWait at most),
// so that none writes to the cache once Run has returned.
type edgeRun struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	running int           // guarded by mu
	idle    chan struct{} // guarded by mu: closed when running reaches 0 after stop
}

// edgeStopWait bounds stop's wait: a canceled fetch ends at its next
// read or write.
const edgeStopWait = 10 * time.Second

// edgeGo runs fn as one of them.
func (s *Server) edgeGo(fn func()) {
	s.edge.enter()
	go func() {
		defer s.edge.exit()
		fn()
	}()
}

func (r *edgeRun) enter() {
	r.mu.Lock()
	r.running++
	r.mu.Unlock()
}

func (r *edgeRun) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running--; r.running == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

func (r *edgeRun) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.mu.Lock()
	if r.running == 0 {
		r.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	r.idle = idle
	r.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(edgeStopWait):
	}
}

// edgeOrigin returns the route's client, made on first use.
func (s *Server) edgeOrigin(r *routing.Route) *edgeOrigin {
	return r.Attach(func() any { return newEdgeOrigin(r, s.log) }).(*edgeOrigin)
}

func newEdgeOrigin(r *routing.Route, log *slog.Logger) *edgeOrigin {
	cfg := r.Cfg
	byAddr := make(map[string]*routing.Upstream, len(r.Ups))
	for _, u := range r.Ups {
		byAddr[u.Addr.String()] = u
	}
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		u := byAddr[addr]
		if u == nil {
			return nil, fmt.Errorf("edge cache: %s is no upstream of %s", addr, r.Key)
		}
		ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout.D())
		defer cancel()
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil && u.TLS != nil {
			tc := tls.Client(c, u.TLS)
			if err = tc.HandshakeContext(ctx); err != nil {
				c.Close()
			}
			c = tc
		}
		if err != nil {
			u.Failed()
			return nil, err
		}
		u.Failures.Store(0)
		return &readTimeoutConn{Conn: c, d: cfg.ReadTimeout.D()}, nil
	}
	tr := &http.Transport{
		DialContext:            dial,
		DialTLSContext:         dial,
		ResponseHeaderTimeout:  cfg.ResponseTimeout.D(),
		IdleConnTimeout:        cfg.IdleTimeout.D(),
		MaxIdleConnsPerHost:    32,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true, // the object is the origin's bytes, as they are
	}
	o := &edgeOrigin{r: r, client: &http.Client{
		Transport: tr,
		// A redirect is the origin's answer, passed on, not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	if cfg.CacheManifest != "" {
		// Read and judged when the configuration was: a file that went
		// bad since leaves the objects unverified, not the route down.
		var err error
		if o.manifest, err = config.LoadManifest(cfg.CacheManifest); err != nil {
			log.Warn("edge cache: the route's cache_manifest is unreadable now; its objects are stored unverified", "route", r.Key, "err", err)
		}
	}
	if cfg.Origin == "s3" {
		if cfg.S3Credentials != "" {
			profile := os.Getenv("AWS_PROFILE")
			if profile == "" {
				profile = "default"
			}
			o.s3 = credentials.NewFileAWSCredentials(cfg.S3Credentials, profile)
		} else {
			o.s3 = credentials.NewEnvAWS()
		}
	}
	return o
}

// readTimeoutConn bounds each read of an origin's connection: an origin
// that stops sending in the middle of a body is given up after
// read_timeout, as the proxy's exchange gives it up.
type readTimeoutConn struct {
	net.Conn
	d time.Duration
}

func (c *readTimeoutConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.d))
	return c.Conn.Read(p)
}

// errNoUpstream is a request no upstream of the route can take now:
// each one failed and is backing off.
var errNoUpstream = errors.New("every upstream of the route is down (backing off after failed connections)")

// errNotObject is a request an S3 origin is not asked: it names no
// object (the bucket itself: a listing).
var errNotObject = errors.New("the path names no object of the bucket")

// do sends a request for target (the path as the client sent it,
// escaped, and its query; nil: none) with host as its Host, and fields,
// to an upstream of the route, another one after a failed connection.
func (o *edgeOrigin) do(ctx context.Context, method, path string, query *string, host string, fields http.Header) (*http.Response, error) {
	var last error = errNoUpstream
	for range len(o.r.Ups) {
		u := o.r.Pick(time.Now().UnixNano())
		if u == nil {
			break
		}
		req, err := o.request(ctx, u, method, path, query, host, fields)
		if err != nil {
			return nil, err
		}
		u.Active.Add(1)
		resp, err := o.client.Do(req)
		u.Active.Add(-1)
		if err == nil {
			return resp, nil
		}
		last = err
		if ctx.Err() != nil || !dialFailed(err) {
			break
		}
	}
	return nil, last
}

// dialFailed reports whether err is a connection that could not be made
// (another upstream may be tried), not a request that failed on one.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// request makes the request for upstream u.
func (o *edgeOrigin) request(ctx context.Context, u *routing.Upstream, method, path string, query *string, host string, fields http.Header) (*http.Request, error) {
	scheme := "http"
	if u.TLS != nil {
		scheme = "https"
	}
	p, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("the path %q is not valid percent-encoding", path)
	}
	// The path goes as the client spelled it (RawPath).
	target := &url.URL{Scheme: scheme, Host: u.Addr.String(), Path: p, RawPath: path}
	if query != nil {
		target.RawQuery, target.ForceQuery = *query, *query == ""
	}
	if o.s3 != nil {
		// The object of the bucket the path names (path style). The
		// client's query is not the store's: it would name other
		// operations (a listing, an object's ACL).
		if p == "/" || p == "" {
			return nil, errNotObject
		}
		p = "/" + o.r.Cfg.S3Bucket + p
		target = &url.URL{Scheme: scheme, Host: u.Addr.String(), Path: p, RawPath: s3utils.EncodePath(p)}
		host = u.Name
		if h, port, err := net.SplitHostPort(host); err == nil && (port == "443" && scheme == "https" || port == "80" && scheme == "http") {
			host = h
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+target.Host+"/", nil)
	if err != nil {
		return nil, err
	}
	req.URL = target // as made: String and Parse could spell the path otherwise
	req.Host = host
	for k, v := range fields {
		req.Header[k] = v
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // none, rather than Go's
	}
	if o.s3 != nil {
		v, err := o.s3.GetWithContext(nil)
		if err != nil {
			return nil, fmt.Errorf("S3 credentials: %w", err)
		}
		req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		req.Header.Set("X-Amz-Checksum-Mode", "ENABLED") // the object's SHA-256, when it was stored with one
		req = signer.SignV4(*req, v.AccessKeyID, v.SecretAccessKey, v.SessionToken, o.r.Cfg.S3Region)
	}
	return req, nil
}

// emptySHA256 is the SHA-256 of no bytes, in hex: the payload hash of a
// request without a body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// s3Fields are the fields of a client's request an S3 origin is sent:
// the others could carry credentials of the client's own or ask the
// store for other operations.
var s3Fields = []string{"Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"}

// fetchFields are the first client's fields for the fetch of an object:
// all but those asking for less than the whole object as it is (a
// range, conditions of the client's own, an encoding); none of them for
// S3.
func (o *edgeOrigin) fetchFields(h http.Header) http.Header {
	if o.s3 != nil {
		return nil
	}
	h = h.Clone()
	for _, k := range []string{"Host", "Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "Accept-Encoding", "Origin"} {
		h.Del(k)
	}
	return h
}

// passFields are the client's fields for its own request to the
// origin: all of them for a web server, those above for S3.
func (o *edgeOrigin) passFields(h http.Header) http.Header {
	if o.s3 == nil {
		h.Del("Host")
		return h
	}
	out := http.Header{}
	for _, k := range s3Fields {
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}
