package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mediaship/engine/integrity"
)

// expect is what one URL's responses must be.
type expect struct {
	status int
	size   int64             // -1: whatever Content-Length says
	digest *integrity.Digest // nil: not checked
}

// expectations works out, per URL, the status, length and digest to
// demand.
func (c *Config) expectations() ([]expect, string, error) {
	byPath := map[string]integrity.Digest{}
	for _, e := range c.Manifest {
		byPath[e.Path] = e.Digest
	}
	out := make([]expect, len(c.URLs))
	checked := "length only (no manifest or digest given)"
	for i, raw := range c.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, "", fmt.Errorf("bench: %q is not an http(s) URL", raw)
		}
		if c.Protocol != "h1" && u.Scheme != "https" {
			return nil, "", fmt.Errorf("bench: %s needs an https URL", c.Protocol)
		}
		e := expect{status: 200, size: c.ExpectSize}
		rel := strings.TrimPrefix(path.Clean("/"+u.Path), "/")
		switch {
		case c.RangeLast >= 0:
			e.status = 206
			if c.LocalRoot == "" {
				return nil, "", errors.New("bench: a range workload needs a local manifest: the slice is checked against the file beside it")
			}
			f, err := os.Open(filepath.Join(c.LocalRoot, filepath.FromSlash(rel)))
			if err != nil {
				return nil, "", fmt.Errorf("bench: the local copy for the range: %w", err)
			}
			st, _ := f.Stat()
			last := min(c.RangeLast, st.Size()-1)
			d, err := integrity.SumRange(f, c.RangeFirst, last-c.RangeFirst+1)
			f.Close()
			if err != nil {
				return nil, "", err
			}
			e.size, e.digest = last-c.RangeFirst+1, &d
			checked = "status 206, length and BLAKE3 of the slice"
		case c.ExpectDigest != nil:
			d := *c.ExpectDigest
			e.digest = &d
			checked = "status, length and the given BLAKE3 digest"
		case len(byPath) > 0:
			d, ok := byPath[rel]
			if !ok {
				return nil, "", fmt.Errorf("bench: %s is not in the manifest", rel)
			}
			e.digest = &d
			checked = "status, length and BLAKE3 digest from the manifest"
		}
		out[i] = e
	}
	return out, checked, nil
}

var hashBufs = sync.Pool{New: func() any { b := make([]byte, readBuffer); return &b }}

// acc accumulates one sample, per worker (merged at the end).
type acc struct {
	bytes, responses int64
	errs             map[string]int
	lat              []time.Duration
	// checked: a response that passed every check streamed during this
	// sample, though it may have finished in a later one. A large file at a
	// low rate can span several samples; they count once it is verified.
	checked bool
}

// worker state shared by all workers of a run.
type runState struct {
	c       *Config
	exp     []expect
	t0      time.Time // end of warmup: measuring starts
	sampleD time.Duration
	end     time.Time
	done    atomic.Int64 // responses completed while measuring (Requests mode)
	stop    atomic.Bool
	bytes   atomic.Int64
	resps   atomic.Int64
	errs    atomic.Int64
	dials   atomic.Int64

	mu       sync.Mutex
	samples  []acc
	warmErrs map[string]int
}

// sampleAt is the sample a moment (or the n-th response) belongs to, or
// -1 during warmup.
func (s *runState) sampleAt(t time.Time) int {
	if t.Before(s.t0) {
		return -1
	}
	if s.c.Requests > 0 {
		i := int(s.done.Load() * int64(s.c.Samples) / int64(s.c.Requests))
		return min(i, s.c.Samples-1)
	}
	return min(int(t.Sub(s.t0)/s.sampleD), s.c.Samples-1)
}

// Run measures. It returns the report even when ctx is cancelled midway
// (Interrupted is then set), and an error only when nothing could run.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.withDefaults(); err != nil {
		return nil, err
	}
	exp, checked, err := c.expectations()
	if err != nil {
		return nil, err
	}
	s := &runState{c: &c, exp: exp, samples: make([]acc, c.Samples), warmErrs: map[string]int{}}
	for i := range s.samples {
		s.samples[i].errs = map[string]int{}
	}
	start := time.Now()
	s.t0 = start.Add(c.Warmup)
	if c.Duration > 0 {
		s.sampleD = c.Duration / time.Duration(c.Samples)
		s.end = s.t0.Add(c.Duration)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The server is measured over the samples, not the warmup.
	srvCh := make(chan *serverWatch, 1)
	time.AfterFunc(c.Warmup, func() { srvCh <- startServerStats(c.ServerPID) })

	// Open loop: a dispatcher hands out scheduled start times.
	var tickets chan time.Time
	if c.Rate > 0 {
		tickets = make(chan time.Time, 1<<20)
		go func() {
			interval := time.Duration(float64(time.Second) / c.Rate)
			next := time.Now()
			for runCtx.Err() == nil && !s.stop.Load() {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				select {
				case tickets <- next:
				default: // over a million behind: the server has stopped
				}
				next = next.Add(interval)
			}
			close(tickets)
		}()
	}

	conns := make([]*conn, c.Connections)
	var wg sync.WaitGroup
	for i := range conns {
		conns[i] = newConn(&c, &s.dials)
		for st := 0; st < c.Streams; st++ {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				s.worker(runCtx, conns[i], id, tickets)
			}(i*c.Streams + st)
		}
	}
	// The clock: stop at the end, report progress.
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case now := <-t.C:
				if c.Progress != nil {
					c.Progress(ProgressInfo{Elapsed: now.Sub(start), Bytes: s.bytes.Load(), Responses: s.resps.Load(),
						Errors: s.errs.Load(), Warmup: now.Before(s.t0)})
				}
				if c.Duration > 0 && now.After(s.end) {
					s.stop.Store(true)
					cancel()
				}
			}
		}
	}()
	if c.Duration > 0 {
		time.AfterFunc(time.Until(s.end), func() { s.stop.Store(true); cancel() })
	}
	wg.Wait()
	for _, cn := range conns {
		cn.close()
	}
	interrupted := ctx.Err() != nil
	elapsed := time.Since(s.t0)
	var srv *serverWatch
	select {
	case srv = <-srvCh:
	default: // stopped during the warmup
	}
	return s.report(checked, elapsed, interrupted, srv.finish()), nil
}

// worker issues requests until the run stops.
func (s *runState) worker(ctx context.Context, cn *conn, id int, tickets chan time.Time) {
	c := s.c
	buf := make([]byte, readBuffer)
	for n := id; ; n++ {
		if s.stop.Load() || ctx.Err() != nil {
			return
		}
		if c.Requests > 0 && s.done.Load() >= int64(c.Requests) {
			s.stop.Store(true)
			return
		}
		begin := time.Now()
		if tickets != nil {
			t, ok := <-tickets
			if !ok {
				return
			}
			begin = t // latency counts from the schedule, not from when we got to it
		}
		i := n % len(c.URLs)
		kind, lat := s.one(ctx, cn, c.URLs[i], s.exp[i], begin, buf)
		end := time.Now()
		if s.stop.Load() && kind != "" && (ctx.Err() != nil || end.After(s.end) && c.Duration > 0) {
			return // cut off by the end of the run: not a failure
		}
		s.record(begin, end, kind, lat)
	}
}

// one makes a request and checks the response. It returns the failure
// kind ("" when right) and the latency.
func (s *runState) one(ctx context.Context, cn *conn, u string, e expect, begin time.Time, buf []byte) (string, time.Duration) {
	c := s.c
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", u, nil)
	if c.RangeLast >= 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", c.RangeFirst, c.RangeLast))
	}
	resp, err := cn.rt.RoundTrip(req)
	if err != nil {
		return classify(err), 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != e.status {
		io.Copy(io.Discard, resp.Body)
		return "status", 0
	}
	want := map[string]int{"h1": 1, "h2": 2, "h3": 3}[c.Protocol]
	if resp.ProtoMajor != want {
		return "protocol", 0
	}
	size := e.size
	if size < 0 {
		size = resp.ContentLength
	}
	if size < 0 {
		return "no-length", 0
	}
	if resp.ContentLength >= 0 && resp.ContentLength != size {
		return "length", 0
	}
	// Read on this goroutine, hash on another: the pipe hands each
	// chunk over and the next network read overlaps its hashing.
	pr, pw := io.Pipe()
	verdict := make(chan error, 1)
	go func() {
		vr := integrity.NewReader(pr, size, e.digest)
		hbuf := hashBufs.Get().(*[]byte)
		var err error
		for err == nil {
			_, err = vr.Read(*hbuf) // large reads: the pipe hands over whole chunks
		}
		hashBufs.Put(hbuf)
		if err == io.EOF {
			err = nil
		}
		pr.CloseWithError(err)
		verdict <- err
	}()
	var readErr error
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			s.count(int64(n))
			if _, werr := pw.Write(buf[:n]); werr != nil {
				readErr = werr
				break
			}
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	if readErr != nil {
		pw.CloseWithError(readErr)
	} else {
		pw.Close()
	}
	verr := <-verdict
	lat := time.Since(begin)
	switch {
	case errors.Is(verr, integrity.ErrMismatch):
		return "digest", lat
	case errors.Is(verr, integrity.ErrTooLong):
		return "too-long", lat
	case readErr != nil && errors.Is(readErr, syscall.ECONNRESET):
		return "reset", lat
	case readErr != nil && isTimeout(readErr):
		return "timeout", lat
	case errors.Is(verr, integrity.ErrTruncated), readErr != nil:
		return "truncated", lat
	case verr != nil:
		return "transport", lat
	}
	return "", lat
}

// count adds body bytes to the sample of this moment.
func (s *runState) count(n int64) {
	s.bytes.Add(n)
	if i := s.sampleAt(time.Now()); i >= 0 {
		s.mu.Lock()
		s.samples[i].bytes += n
		s.mu.Unlock()
	}
}

// record books one finished request: a failure rejects every sample the
// request overlapped, a success vouches for them.
func (s *runState) record(begin, end time.Time, kind string, lat time.Duration) {
	s.resps.Add(1)
	if kind != "" {
		s.errs.Add(1)
	}
	first, last := s.sampleAt(begin), s.sampleAt(end)
	s.mu.Lock()
	defer s.mu.Unlock()
	if last < 0 {
		if kind != "" {
			s.warmErrs[kind]++
		}
		return
	}
	if s.c.Requests > 0 {
		s.done.Add(1)
	}
	if kind != "" {
		for i := max(first, 0); i <= last; i++ {
			s.samples[i].errs[kind]++
		}
		return
	}
	for i := max(first, 0); i <= last; i++ {
		s.samples[i].checked = true
	}
	s.samples[last].responses++
	s.samples[last].lat = append(s.samples[last].lat, lat)
}

func classify(err error) string {
	var tlsErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	var opErr *net.OpError
	switch {
	case isTimeout(err):
		return "timeout"
	case errors.As(err, &tlsErr), errors.As(err, &certErr), strings.Contains(err.Error(), "tls:"):
		return "tls"
	case errors.As(err, &opErr) && opErr.Op == "dial", errors.Is(err, syscall.ECONNREFUSED):
		return "connect"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	}
	return "transport"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
