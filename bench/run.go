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
	status       int
	size         int64             // -1: whatever Content-Length says
	digest       *integrity.Digest // nil: not checked
	contentRange string            // for a range: the exact Content-Range
	wt           *wtExpect         // webtransport: the session's mode
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
		if c.Protocol == "webtransport" {
			if checked, err = c.wtExpectation(u, &e, byPath); err != nil {
				return nil, "", err
			}
			out[i] = e
			continue
		}
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
			st, err := f.Stat()
			if err != nil || c.RangeFirst >= st.Size() {
				f.Close()
				return nil, "", fmt.Errorf("bench: the range starts at byte %d, beyond the local copy of %s", c.RangeFirst, rel)
			}
			last := min(c.RangeLast, st.Size()-1)
			d, err := integrity.SumRange(f, c.RangeFirst, last-c.RangeFirst+1)
			f.Close()
			if err != nil {
				return nil, "", err
			}
			e.size, e.digest = last-c.RangeFirst+1, &d
			e.contentRange = fmt.Sprintf("bytes %d-%d/%d", c.RangeFirst, last, st.Size())
			checked = "status 206, Content-Range, length and BLAKE3 of the same bytes of the local file"
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
		if e.digest == nil && !c.LengthOnly {
			return nil, "", errors.New("bench: nothing to verify the bodies against: give a manifest or a digest (--manifest B3SUMS, --expect-digest HEX), or --length-only to count bytes whose length alone was checked")
		}
		out[i] = e
	}
	return out, checked, nil
}

// acc accumulates one sample (merged from every worker under runState.mu).
type acc struct {
	// received: body bytes that arrived during this sample; verified: the
	// part of them whose response was then verified in full (status,
	// length, digest). Only verified bytes are figures, and a sample is
	// accepted only when the two are equal.
	received, verified int64
	responses          int64
	errs               map[string]int
	lat                []time.Duration
	// checked: a response that passed every check streamed during this
	// sample, though it may have finished in a later one.
	checked bool
	// dg: the datagram sessions that ended in this sample.
	dg dgCounts
	// scheduled: open-loop requests due in this sample, each recorded
	// once, however it ended.
	scheduled int64
}

// tail is what happened after the measured time: the responses in flight
// at the end, which the run waits for (each up to Config.Timeout) and
// judges.
type tail struct {
	responses, failed  int64 // finished after the end
	received, verified int64 // their bytes that arrived after the end: in no sample
}

// cutOff is what an interruption left unjudged: responses cancelled in
// flight, whose bytes therefore count nowhere.
type cutOff struct {
	responses, received int64
}

// worker state shared by all workers of a run.
type runState struct {
	c       *Config
	exp     []expect
	t0      time.Time // end of warmup: measuring starts
	sampleD time.Duration
	end     time.Time
	// Atomics, each on its own, shared by the workers and the progress
	// line; none is read together with mu's fields.
	done  atomic.Int64 // responses completed while measuring (Requests mode)
	stop  atomic.Bool  // set once: workers end their loops
	bytes atomic.Int64 // received, for the progress line
	resps atomic.Int64
	errs  atomic.Int64
	dials atomic.Int64

	tcp *tcpWatch // nil for QUIC; immutable after construction, safe for concurrent use

	pipelined atomic.Bool // a body longer than one read buffer was read: hashed beside its reader

	kxMu sync.Mutex            // guards kx
	kx   map[tls.CurveID]int64 // responses over TLS by the key exchange of their connection

	mu      sync.Mutex     // guards samples, failed, tail and cut: a response is booked into all of them at once
	samples []acc          // guarded by mu
	failed  map[string]int // guarded by mu; failed responses by kind, each counted once
	tail    tail           // guarded by mu
	cut     cutOff         // guarded by mu
}

// sampleAt is the sample a moment (or the n-th response) belongs to: -1
// during warmup, len(samples) after the measured time.
func (s *runState) sampleAt(t time.Time) int {
	if t.Before(s.t0) {
		return -1
	}
	if s.c.Requests > 0 {
		i := int(s.done.Load() * int64(s.c.Samples) / int64(s.c.Requests))
		return min(i, s.c.Samples-1)
	}
	if !t.Before(s.end) {
		return s.c.Samples
	}
	return min(int(t.Sub(s.t0)/s.sampleD), s.c.Samples-1)
}

// Run measures. It returns the report even when ctx is cancelled midway
// (Interrupted is then set), and an error only when nothing could run.
//
// At the end of the measured time no new request starts (in the open loop:
// none due after the end), and the ones in flight are finished and judged
// (each bounded by Config.Timeout): their bytes count in the samples they
// arrived in once they pass, and a failure rejects those samples. When ctx
// is cancelled instead, requests in flight are cut off and their bytes
// leave the figures.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.withDefaults(); err != nil {
		return nil, err
	}
	exp, checked, err := c.expectations()
	if err != nil {
		return nil, err
	}
	s := &runState{c: &c, exp: exp, samples: make([]acc, c.Samples), failed: map[string]int{}}
	for i := range s.samples {
		s.samples[i].errs = map[string]int{}
	}
	start := time.Now()
	s.t0 = start.Add(c.Warmup)
	s.end = s.t0.Add(c.Duration) // unused in Requests mode
	if c.Duration > 0 {
		s.sampleD = c.Duration / time.Duration(c.Samples)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The server, and this process, are measured over the samples, not
	// the warmup.
	type watches struct {
		server *serverWatch
		client clientWatch
		end    func() // OnSamples's; nil without it
	}
	srvCh := make(chan watches, 1)
	srvTimer := time.AfterFunc(c.Warmup, func() {
		w := watches{server: startServerStats(c.ServerPID, c.AdminURL), client: startClientWatch()}
		if c.OnSamples != nil {
			w.end = c.OnSamples()
		}
		srvCh <- w
	})

	// Open loop: a dispatcher hands out scheduled start times, request k
	// due at start + k/Rate. With a Duration the schedule is counted: every
	// request due before the end is handed out, then the channel closes
	// (and the workers end when they have taken them all), so a server
	// that falls behind near the end cannot shorten it.
	var tickets chan time.Time
	if c.Rate > 0 {
		tickets = make(chan time.Time, 1<<20)
		go func() {
			defer close(tickets)
			interval := time.Duration(float64(time.Second) / c.Rate)
			for k := time.Duration(0); ; k++ {
				due := start.Add(k * interval)
				if c.Requests == 0 && !due.Before(s.end) {
					return
				}
				if d := time.Until(due); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-runCtx.Done():
						t.Stop()
						return
					}
				}
				if runCtx.Err() != nil || c.Requests > 0 && s.stop.Load() {
					return
				}
				select {
				case tickets <- due:
				default: // over a million behind: the server has stopped
				}
			}
		}()
	}

	// TCP_INFO, for h1 and h2: the clock ends each sample's readings.
	tcpQuit, tcpDone := make(chan struct{}), make(chan struct{})
	if c.Protocol == "h1" || c.Protocol == "h2" {
		s.tcp = newTCPWatch(c.Samples)
		go func() {
			defer close(tcpDone)
			s.tcp.clock(s.t0, s.sampleD, c.Requests > 0, tcpQuit)
		}()
	} else {
		close(tcpDone)
	}

	conns := make([]*conn, c.Connections)
	var wg sync.WaitGroup
	for i := range conns {
		conns[i] = newConn(&c, &s.dials, s.tcp)
		for st := 0; st < c.Streams; st++ {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				s.worker(runCtx, conns[i], id, tickets)
			}(i*c.Streams + st)
		}
	}
	// The clock: stop issuing at the end, report progress.
	clockDone := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-clockDone:
				return
			case now := <-t.C:
				if c.Progress != nil {
					c.Progress(ProgressInfo{Elapsed: now.Sub(start), Bytes: s.bytes.Load(), Responses: s.resps.Load(),
						Errors: s.errs.Load(), Warmup: now.Before(s.t0), Draining: s.stop.Load()})
				}
			}
		}
	}()
	if c.Duration > 0 {
		stopAt := time.AfterFunc(time.Until(s.end), func() { s.stop.Store(true) })
		defer stopAt.Stop()
	}
	wg.Wait()
	close(clockDone)
	close(tcpQuit)
	<-tcpDone
	if s.tcp != nil {
		s.tcp.finish()
	}
	for _, cn := range conns {
		cn.close()
	}
	interrupted := ctx.Err() != nil
	elapsed := time.Since(s.t0)
	var w watches
	if !srvTimer.Stop() {
		// Started: its first reading may still be under way (an admin
		// listener answering slowly, bounded by its client's timeout).
		w = <-srvCh
	} // else stopped during the warmup: nothing measured
	srv := w.server.finish()
	if w.end != nil {
		w.end()
	}
	return s.report(checked, elapsed, interrupted, srv, w.client), nil
}

// worker issues requests until the run stops.
func (s *runState) worker(ctx context.Context, cn *conn, id int, tickets chan time.Time) {
	c := s.c
	br := newBodyReader()
	defer br.close()
	var ws *wtState
	if c.Protocol == "webtransport" {
		ws = &wtState{}
	}
	// arrived[k+1] is the body bytes of the current response that arrived
	// in sample k (k = -1: warmup, k = Samples: after the end).
	arrived := make([]int64, c.Samples+2)
	// A counted schedule, not the clock, ends the open loop (Run).
	scheduled := tickets != nil && c.Requests == 0
	for n := id; ; n++ {
		if ctx.Err() != nil || s.stop.Load() && !scheduled {
			return
		}
		if c.Requests > 0 && s.done.Load() >= int64(c.Requests) {
			s.stop.Store(true)
			return
		}
		clear(arrived)
		begin := time.Now()
		if tickets != nil {
			t, ok := <-tickets
			if !ok {
				return
			}
			begin = t // latency counts from the schedule, not from when we got to it
			if time.Since(t) > c.Timeout {
				// Already later than a request may take: not sent. This
				// bounds the wait at the end when the server has stalled.
				s.record(begin, time.Now(), behindKind, 0, arrived, nil)
				continue
			}
		}
		i := n % len(c.URLs)
		var kind string
		var lat time.Duration
		var dg *dgCounts
		if ws != nil {
			kind, lat = s.oneWT(ctx, cn, c.URLs[i], s.exp[i], begin, br, arrived, ws)
			if s.exp[i].wt.mode == "datagrams" {
				dg = &ws.dg
			}
		} else {
			kind, lat = s.one(ctx, cn, c.URLs[i], s.exp[i], begin, br, arrived)
		}
		if kind != "" && ctx.Err() != nil {
			kind = cutKind // cancelled by the caller: neither right nor wrong
		}
		s.record(begin, time.Now(), kind, lat, arrived, dg)
	}
}

// cutKind marks a response cut off by an interruption.
const cutKind = "cut-off"

// behindKind marks an open-loop request the run never sent: every worker
// was busy until more than Timeout after it was due.
const behindKind = "behind-schedule"

// one makes a request and checks the response. It returns the failure
// kind ("" when right) and the latency, and adds the body bytes to
// arrived by the sample they arrived in.
func (s *runState) one(ctx context.Context, cn *conn, u string, e expect, begin time.Time, br *bodyReader, arrived []int64) (string, time.Duration) {
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
	if resp.TLS != nil {
		s.keyExchange(resp.TLS.CurveID)
	}
	if resp.StatusCode != e.status {
		s.drain(resp.Body, br.scratch(), arrived) // counted as received, never verified
		return "status", 0
	}
	want := map[string]int{"h1": 1, "h2": 2, "h3": 3}[c.Protocol]
	if resp.ProtoMajor != want {
		return "protocol", 0
	}
	if e.contentRange != "" && resp.Header.Get("Content-Range") != e.contentRange {
		s.drain(resp.Body, br.scratch(), arrived)
		return "range", 0
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
	if size > bodyBuffer {
		s.pipelined.Store(true)
	}
	verr, readErr := br.read(resp.Body, size, e.digest, func(n int) { s.arrive(arrived, n) })
	lat := time.Since(begin)
	switch {
	case errors.Is(verr, integrity.ErrMismatch):
		return "digest", lat
	case errors.Is(verr, integrity.ErrTooLong):
		return "too-long", lat
	case readErr != nil && errors.Is(readErr, syscall.ECONNRESET):
		return "reset", lat
	case readErr != nil && (isTimeout(readErr) || errors.Is(rctx.Err(), context.DeadlineExceeded)):
		return "timeout", lat // the h3 client reports a deadline as a cancelled stream
	case errors.Is(verr, integrity.ErrTruncated), readErr != nil:
		return "truncated", lat
	case verr != nil:
		return "transport", lat
	}
	return "", lat
}

// keyExchange counts a response that came over a TLS connection that
// negotiated id.
func (s *runState) keyExchange(id tls.CurveID) {
	s.kxMu.Lock()
	if s.kx == nil {
		s.kx = map[tls.CurveID]int64{}
	}
	s.kx[id]++
	s.kxMu.Unlock()
}

// arrive books n body bytes of the current response at this moment.
func (s *runState) arrive(arrived []int64, n int) {
	s.bytes.Add(int64(n))
	arrived[s.sampleAt(time.Now())+1] += int64(n)
}

// drain reads a body that is already judged wrong, counting what arrives.
func (s *runState) drain(body io.Reader, buf []byte, arrived []int64) {
	for {
		n, err := body.Read(buf)
		if n > 0 {
			s.arrive(arrived, n)
		}
		if err != nil {
			return
		}
	}
}

// record books one finished request. Its bytes are received in the
// samples they arrived in; they are verified there only when the whole
// response passed. A failure rejects every sample the request
// overlapped; a pass vouches for them. dg, a datagram session's figures,
// is booked in the sample the session ended in, passed or failed.
func (s *runState) record(begin, end time.Time, kind string, lat time.Duration, arrived []int64, dg *dgCounts) {
	s.resps.Add(1)
	if kind != "" && kind != cutKind {
		s.errs.Add(1)
	}
	n := s.c.Samples
	first, last := s.sampleAt(begin), s.sampleAt(end)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c.Rate > 0 && s.c.Requests == 0 && first >= 0 && first < n {
		s.samples[first].scheduled++ // begin is when it was due
	}
	var measured int64 // bytes that arrived in the samples
	for i := range s.samples {
		s.samples[i].received += arrived[i+1]
		measured += arrived[i+1]
	}
	late := arrived[n+1]
	s.tail.received += late
	if kind == cutKind {
		s.cut.responses++
		s.cut.received += measured + late
		return
	}
	if kind != "" {
		s.failed[kind]++
	}
	if last < 0 {
		return
	}
	if dg != nil && last < n {
		s.samples[last].dg.add(*dg)
	}
	if s.c.Requests > 0 {
		// The response that ends a sample ends its TCP readings too.
		d, r := s.done.Add(1), int64(s.c.Requests)
		if s.tcp != nil && d <= r && d*int64(n)/r != (d-1)*int64(n)/r {
			s.tcp.sampleEnded()
		}
	}
	if last == n { // finished after the measured time
		s.tail.responses++
		if kind != "" {
			s.tail.failed++
		}
	}
	if kind != "" {
		for i := max(first, 0); i <= min(last, n-1); i++ {
			s.samples[i].errs[kind]++
		}
		return
	}
	for i := range s.samples {
		s.samples[i].verified += arrived[i+1]
	}
	s.tail.verified += late
	for i := max(first, 0); i <= min(last, n-1); i++ {
		s.samples[i].checked = true
	}
	if last < n {
		s.samples[last].responses++
	}
	if first < n {
		s.samples[min(last, n-1)].lat = append(s.samples[min(last, n-1)].lat, lat)
	}
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
