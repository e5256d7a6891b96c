package bench

import (
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"syscall"
	"time"
)

// The client's TCP sockets (h1 and h2) are read with TCP_INFO (Linux
// only): each live socket at the end of every sample, and each socket
// that closes during a sample just before it closes, so every socket that
// carried part of a sample is read once for it. Counters are deltas since
// the socket's previous reading (the end of the previous sample, or its
// dial), so a connection kept across samples is not counted twice; the
// warmup's end is a reading that books nothing. A sample's end is read
// when the run's clock reaches it (in --requests mode, when its last
// response is booked), a little after the figures' own boundary.
//
// These are the client's sockets, which send requests and receive
// bodies. Their retransmits are the client's own (requests and the
// handshake), the server's are counted on the server; loss or reordering
// on the way to the client shows as out-of-order packets received. RTT is
// the kernel's smoothed estimate from the ACKs of the client's segments.
// tcpi_delivery_rate is not reported: it estimates the rate of the
// socket's own sends, which for a downloading client is a figure from the
// handshake that no body moves (on loopback it stayed at 1.49e9 B/s while
// 300 MiB arrived); the receive rate, from tcpi_bytes_received, is the
// rate the responses arrived at, TLS and HTTP framing included.

// TCPSample is what TCP_INFO said of the client's sockets over one sample.
type TCPSample struct {
	Sockets int `json:"sockets"`                  // sockets read for this sample
	Unread  int `json:"sockets_unread,omitempty"` // sockets whose TCP_INFO could not be read
	// Retransmits is the sum over the sockets of tcpi_total_retrans
	// during the sample: segments the client sent again.
	Retransmits int64 `json:"retransmits"`
	// OutOfOrder is the sum of tcpi_rcv_ooopack during the sample:
	// packets that arrived out of order (server-side loss or reordering).
	OutOfOrder int64 `json:"out_of_order_packets"`
	// tcpi_rtt and tcpi_rttvar at the reading, median and max over the
	// sockets, in microseconds.
	RTTMedian    float64 `json:"rtt_median_us"`
	RTTMax       float64 `json:"rtt_max_us"`
	RTTVarMedian float64 `json:"rttvar_median_us"`
	RTTVarMax    float64 `json:"rttvar_max_us"`
	// ReceiveRate is the median over the sockets of the bytes each
	// received (tcpi_bytes_received) per second since its previous
	// reading: a typical connection's rate, whatever their number.
	ReceiveRate float64 `json:"receive_bytes_per_s_median"`
}

// TCPSummary is TCP_INFO over the accepted samples that have a reading.
type TCPSummary struct {
	Samples     int     `json:"samples"`
	Retransmits Summary `json:"retransmits_per_sample"`
	OutOfOrder  Summary `json:"out_of_order_packets_per_sample"`
	RTT         Summary `json:"rtt_us"`     // of the samples' median RTTs
	RTTMax      float64 `json:"rtt_max_us"` // the largest socket RTT read
	RTTVar      Summary `json:"rttvar_us"`  // of the samples' median RTT variations
	ReceiveRate Summary `json:"receive_bytes_per_s"`
}

// tcpReading is one TCP_INFO reading of a socket.
type tcpReading struct {
	at          time.Time
	retrans     uint32 // tcpi_total_retrans
	ooo         uint32 // tcpi_rcv_ooopack
	received    uint64 // tcpi_bytes_received
	rtt, rttvar uint32 // µs
}

// tcpSocket is one socket's share of a sample.
type tcpSocket struct {
	retrans, ooo int64
	rtt, rttvar  float64
	rate         float64 // bytes/s; -1: no time passed since the previous reading
}

func (r tcpReading) since(prev tcpReading) tcpSocket {
	s := tcpSocket{retrans: int64(r.retrans - prev.retrans), ooo: int64(r.ooo - prev.ooo),
		rtt: float64(r.rtt), rttvar: float64(r.rttvar), rate: -1}
	if d := r.at.Sub(prev.at); d > 0 {
		s.rate = float64(r.received-prev.received) / d.Seconds()
	}
	return s
}

// tcpWatch tracks a run's client sockets and books their readings into
// the samples.
type tcpWatch struct {
	// Immutable after construction.
	n    int                                       // samples
	next chan struct{}                             // --requests mode: one send per sample that ended
	read func(syscall.RawConn) (tcpReading, error) // readTCPInfo; tests replace it

	mu      sync.Mutex // guards the fields below and every tcpConn.prev
	live    map[*tcpConn]struct{}
	cur     int           // the sample being read: -1 in the warmup, n after the end
	samples [][]tcpSocket // per sample, a socket each
	unread  []int
	err     error // the first reading that failed
}

func newTCPWatch(samples int) *tcpWatch {
	return &tcpWatch{n: samples, next: make(chan struct{}, samples), read: readTCPInfo, live: map[*tcpConn]struct{}{}, cur: -1,
		samples: make([][]tcpSocket, samples), unread: make([]int, samples)}
}

// tcpConn is a client socket that is read just before it closes.
type tcpConn struct {
	net.Conn
	raw  syscall.RawConn
	w    *tcpWatch
	once sync.Once
	prev tcpReading // guarded by w.mu
}

func (c *tcpConn) Close() error {
	c.once.Do(func() { c.w.closing(c) })
	return c.Conn.Close()
}

// track wraps a freshly dialled connection so that it is read.
func (w *tcpWatch) track(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	t := &tcpConn{Conn: c, raw: raw, w: w, prev: tcpReading{at: time.Now()}}
	w.mu.Lock()
	w.live[t] = struct{}{}
	w.mu.Unlock()
	return t
}

func (w *tcpWatch) closing(c *tcpConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.live[c]; ok {
		w.readLocked(c)
		delete(w.live, c)
	}
}

// readLocked reads a socket and books it into the current sample.
func (w *tcpWatch) readLocked(c *tcpConn) {
	r, err := w.read(c.raw)
	book := w.cur >= 0 && w.cur < w.n
	if err != nil {
		if book {
			w.unread[w.cur]++
		}
		if w.err == nil {
			w.err = err
		}
		return
	}
	r.at = time.Now()
	if book {
		w.samples[w.cur] = append(w.samples[w.cur], r.since(c.prev))
	}
	c.prev = r
}

// endSample reads every live socket into the current sample and moves on
// to the next (from the warmup, to the first).
func (w *tcpWatch) endSample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur >= w.n {
		return
	}
	for c := range w.live {
		w.readLocked(c)
	}
	w.cur++
}

// sampleEnded tells the clock, in --requests mode, that a sample's last
// response was booked.
func (w *tcpWatch) sampleEnded() {
	select {
	case w.next <- struct{}{}:
	default: // more than n: cannot happen
	}
}

// clock ends the samples: the warmup at t0, then every sampleD, or in
// --requests mode at each sampleEnded. It returns at the last or when
// quit is closed.
func (w *tcpWatch) clock(t0 time.Time, sampleD time.Duration, byRequests bool, quit <-chan struct{}) {
	wait := func(at time.Time) bool {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-quit:
			return false
		}
	}
	if !wait(t0) {
		return
	}
	w.endSample()
	for k := 1; k <= w.n; k++ {
		if byRequests {
			select {
			case <-w.next:
			case <-quit:
				return
			}
		} else if !wait(t0.Add(time.Duration(k) * sampleD)) {
			return
		}
		w.endSample()
	}
}

// finish ends the sample under way, if the clock did not (an
// interruption, or a run that stopped before its requests), and stops
// booking: sockets that close from now on are in no sample.
func (w *tcpWatch) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur >= 0 && w.cur < w.n {
		for c := range w.live {
			w.readLocked(c)
		}
	}
	w.cur = w.n
}

// sample is sample i's TCPSample, nil when no socket was tried.
func (w *tcpWatch) sample(i int) *TCPSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	socks := w.samples[i]
	if len(socks) == 0 && w.unread[i] == 0 {
		return nil
	}
	t := &TCPSample{Sockets: len(socks), Unread: w.unread[i]}
	var rtt, rttvar, rate []float64
	for _, s := range socks {
		t.Retransmits += s.retrans
		t.OutOfOrder += s.ooo
		rtt, rttvar = append(rtt, s.rtt), append(rttvar, s.rttvar)
		if s.rate >= 0 {
			rate = append(rate, s.rate)
		}
	}
	r, v := summarize(rtt), summarize(rttvar)
	t.RTTMedian, t.RTTMax, t.RTTVarMedian, t.RTTVarMax = r.Median, r.Max, v.Median, v.Max
	t.ReceiveRate = summarize(rate).Median
	return t
}

// notMeasured is why no socket could be read, "" when one was.
func (w *tcpWatch) notMeasured() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if len(s) > 0 {
			return ""
		}
	}
	if w.err != nil {
		return w.err.Error()
	}
	return ""
}

// summarizeTCP is TCPSummary over samples (the accepted ones); nil when
// none has a reading.
func summarizeTCP(samples []*TCPSample) *TCPSummary {
	var retrans, ooo, rtt, rttvar, rate []float64
	var rttMax float64
	for _, t := range samples {
		if t == nil || t.Sockets == 0 {
			continue
		}
		retrans, ooo = append(retrans, float64(t.Retransmits)), append(ooo, float64(t.OutOfOrder))
		rtt, rttvar, rate = append(rtt, t.RTTMedian), append(rttvar, t.RTTVarMedian), append(rate, t.ReceiveRate)
		rttMax = max(rttMax, t.RTTMax)
	}
	if len(rtt) == 0 {
		return nil
	}
	return &TCPSummary{Samples: len(rtt), Retransmits: summarize(retrans), OutOfOrder: summarize(ooo),
		RTT: summarize(rtt), RTTMax: rttMax, RTTVar: summarize(rttvar), ReceiveRate: summarize(rate)}
}

// tcpColumns is a sample's TCP figures for its line of the text report.
func (r *Report) tcpColumns(t *TCPSample) string {
	switch {
	case r.TCPNotMeasured != "":
		return ""
	case t == nil || t.Sockets == 0:
		return fmt.Sprintf("%-42s  ", "tcp: no socket read") // as wide as the columns
	}
	return fmt.Sprintf("rtt %7s max %7s  retr %3d  ooo %3d  ", us(t.RTTMedian), us(t.RTTMax), t.Retransmits, t.OutOfOrder)
}

// writeTCP is the summary's TCP line.
func (r *Report) writeTCP(w io.Writer) {
	t := r.TCP
	switch {
	case r.TCPNotMeasured != "":
		fmt.Fprintf(w, "tcp:        not measured (%s)\n", r.TCPNotMeasured)
		return
	case t == nil:
		fmt.Fprintf(w, "tcp:        no socket read in an accepted sample\n")
		return
	}
	fmt.Fprintf(w, "tcp:        rtt %s median [%s-%s], max %s, rttvar %s; per sample %.0f retransmits, %.0f out-of-order packets (medians); %.1f MiB/s received per socket (median)\n",
		us(t.RTT.Median), us(t.RTT.Min), us(t.RTT.Max), us(t.RTTMax), us(t.RTTVar.Median),
		t.Retransmits.Median, t.OutOfOrder.Median, t.ReceiveRate.Median/(1<<20))
}

// us prints microseconds as a duration: 45µs, 1.234ms.
func us(v float64) string {
	return time.Duration(math.Round(v) * float64(time.Microsecond)).String()
}
