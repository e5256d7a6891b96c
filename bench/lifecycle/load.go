//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go/http3"
	"github.com/zeebo/blake3"
	"golang.org/x/net/http2"
)

// Target is what the load asks of a server: a small file on keep-alive
// connections over each protocol it serves, and big downloads checked
// byte for byte.
type Target struct {
	Addr      string   // host:port, TLS on TCP and, for h3, QUIC on UDP
	Host      string   // the name sent (SNI and :authority)
	Protos    []string // "h1", "h2", "h3"
	Small     string   // path of the small file
	SmallBody []byte
	Big       string // path of the big file
	BigSum    [32]byte
	BigSize   int64
}

// sample is one small request.
type sample struct {
	start time.Time
	lat   time.Duration
	err   error
	proto string
}

// download is one big download's outcome.
type download struct {
	proto string
	start time.Time
	bytes int64
	err   error // nil: every byte arrived and matched
}

// Load keeps conns keep-alive connections per protocol busy with small
// requests, records each, and runs downloads on request.
type Load struct {
	t      Target
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dlwg   sync.WaitGroup

	mu            sync.Mutex
	samps         []sample
	clientRetries int // h3 requests asked again after the client's own race
	dls           []download
	phases        []phase
}

type phase struct {
	name string
	from time.Time
}

// clientTLS trusts the test's self-signed certificate.
func clientTLS(host string, protos ...string) *tls.Config {
	return &tls.Config{ServerName: host, InsecureSkipVerify: true, NextProtos: protos}
}

// newClient is an HTTP client holding one connection of proto.
func newClient(proto, host string) (*http.Client, func()) {
	switch proto {
	case "h2":
		tr := &http2.Transport{TLSClientConfig: clientTLS(host, "h2")}
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr.CloseIdleConnections
	case "h3":
		tr := &http3.Transport{TLSClientConfig: clientTLS(host)}
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}, func() { tr.Close() }
	}
	tr := &http.Transport{TLSClientConfig: clientTLS(host, "http/1.1"), MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr.CloseIdleConnections
}

// StartLoad starts conns clients per protocol, in phase "before".
func StartLoad(t Target, conns int) *Load {
	l := &Load{t: t}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.Phase("before")
	for _, p := range t.Protos {
		for range conns {
			l.wg.Add(1)
			go l.client(p)
		}
	}
	return l
}

// Phase starts a named phase: samples from now on count in it.
func (l *Load) Phase(name string) {
	l.mu.Lock()
	l.phases = append(l.phases, phase{name, time.Now()})
	l.mu.Unlock()
}

func (l *Load) client(proto string) {
	defer l.wg.Done()
	c, closeIdle := newClient(proto, l.t.Host)
	defer closeIdle()
	url := "https://" + l.t.Addr + l.t.Small
	for l.ctx.Err() == nil {
		start := time.Now()
		err := l.get(c, url)
		if err != nil && proto == "h3" && strings.Contains(err.Error(), "H3_NO_ERROR (local)") {
			// quic-go's client closed its own connection under a
			// request it had just opened: a GOAWAY it read between
			// opening the stream and counting it (http3/client.go,
			// handleControlStream) leaves it counting no request in
			// flight. The server answered nothing wrong; a browser
			// retries. Asked again, and counted apart.
			l.mu.Lock()
			l.clientRetries++
			l.mu.Unlock()
			err = l.get(c, url)
		}
		if l.ctx.Err() != nil && err != nil {
			return // stopped mid-request: not the server's failure
		}
		l.mu.Lock()
		l.samps = append(l.samps, sample{start, time.Since(start), err, proto})
		l.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (l *Load) get(c *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(l.ctx, "GET", url, nil)
	req.Host = l.t.Host
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(len(l.t.SmallBody))+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if !bytes.Equal(body, l.t.SmallBody) {
		return fmt.Errorf("body of %d bytes differs from the file's", len(body))
	}
	return nil
}

// Download starts a download of the big file over proto, read at most
// rate bytes a second so that it stays in flight across the events.
func (l *Load) Download(proto string, rate int64) {
	l.dlwg.Add(1)
	go func() {
		defer l.dlwg.Done()
		d := download{proto: proto, start: time.Now()}
		d.bytes, d.err = l.fetchBig(proto, rate)
		l.mu.Lock()
		l.dls = append(l.dls, d)
		l.mu.Unlock()
	}()
}

func (l *Load) fetchBig(proto string, rate int64) (int64, error) {
	c, closeIdle := newClient(proto, l.t.Host)
	defer closeIdle()
	c.Timeout = 10 * time.Minute
	req, _ := http.NewRequest("GET", "https://"+l.t.Addr+l.t.Big, nil)
	req.Host = l.t.Host
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	h := blake3.New()
	buf := make([]byte, 256<<10)
	var n int64
	start := time.Now()
	for {
		m, err := resp.Body.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
		if ahead := time.Duration(n*int64(time.Second)/rate) - time.Since(start); ahead > 0 {
			time.Sleep(ahead)
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	if n != l.t.BigSize || sum != l.t.BigSum {
		return n, fmt.Errorf("%d bytes, BLAKE3 %x: not the file (%d bytes, %x)", n, sum[:8], l.t.BigSize, l.t.BigSum[:8])
	}
	return n, nil
}

// PhaseReport is one phase's requests.
type PhaseReport struct {
	Name          string
	Requests      int
	Failures      int
	P50, P99, Max time.Duration
	PerSecond     float64
}

// Report is a whole run's.
type Report struct {
	Phases    []PhaseReport
	Failures  []string // the first few, with their protocol and time
	Downloads int
	DLFailed  []string
	// ClientRetries counts HTTP/3 requests asked again after quic-go's
	// client closed its connection under them (see Load.client).
	ClientRetries int
}

// Stop ends the load, waits for the downloads and reports.
func (l *Load) Stop() Report {
	end := time.Now()
	l.cancel()
	l.wg.Wait()
	l.dlwg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var r Report
	for i, ph := range l.phases {
		to := end
		if i+1 < len(l.phases) {
			to = l.phases[i+1].from
		}
		var lats []time.Duration
		pr := PhaseReport{Name: ph.name}
		for _, s := range l.samps {
			if s.start.Before(ph.from) || !s.start.Before(to) {
				continue
			}
			pr.Requests++
			if s.err != nil {
				pr.Failures++
				if len(r.Failures) < 10 {
					r.Failures = append(r.Failures, fmt.Sprintf("%s at +%s (%s): %v", s.proto, s.start.Sub(l.phases[0].from).Round(time.Millisecond), ph.name, s.err))
				}
				continue
			}
			lats = append(lats, s.lat)
		}
		sort.Slice(lats, func(a, b int) bool { return lats[a] < lats[b] })
		if len(lats) > 0 {
			pr.P50, pr.P99, pr.Max = lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1]
		}
		if d := to.Sub(ph.from).Seconds(); d > 0 {
			pr.PerSecond = float64(pr.Requests) / d
		}
		r.Phases = append(r.Phases, pr)
	}
	r.Downloads = len(l.dls)
	r.ClientRetries = l.clientRetries
	for _, d := range l.dls {
		if d.err != nil {
			r.DLFailed = append(r.DLFailed, fmt.Sprintf("%s download started at +%s: %v", d.proto, d.start.Sub(l.phases[0].from).Round(time.Millisecond), d.err))
		}
	}
	return r
}

// Failed sums the failures of every phase.
func (r Report) Failed() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Failures
	}
	return n
}

// Text is the report as a table.
func (r Report) Text(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%-16s %9s %8s %9s %9s %9s %9s\n", name, "phase", "requests", "failed", "req/s", "p50", "p99", "max")
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "%-16s %9d %8d %9.0f %9s %9s %9s\n", p.Name, p.Requests, p.Failures, p.PerSecond,
			p.P50.Round(10*time.Microsecond), p.P99.Round(10*time.Microsecond), p.Max.Round(10*time.Microsecond))
	}
	fmt.Fprintf(&b, "downloads: %d, failed: %d; HTTP/3 requests asked again after the client's own close race: %d\n", r.Downloads, len(r.DLFailed), r.ClientRetries)
	for _, f := range slices.Concat(r.Failures, r.DLFailed) {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}
