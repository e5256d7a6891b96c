package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of a run. Throughput and latency figures come
// from accepted samples only.
type Report struct {
	Command     string   `json:"command"`
	Machine     string   `json:"machine"`
	Kernel      string   `json:"kernel"`
	GoVersion   string   `json:"go"`
	URLs        []string `json:"urls"`
	Protocol    string   `json:"protocol"`
	Connections int      `json:"connections"`
	Streams     int      `json:"streams"`
	Rate        float64  `json:"rate,omitempty"`
	Checked     string   `json:"checked"` // what the integrity gate compared

	Samples  []Sample `json:"samples"`
	Accepted int      `json:"accepted"`
	// BytesReceived is every body byte that arrived from the end of the
	// warmup to the end of the run (the samples and the wait for the
	// responses in flight at the end); Bytes is the part of them whose
	// response was verified in full. Figures count only verified bytes.
	BytesReceived int64   `json:"bytes_received"`
	Bytes         int64   `json:"bytes_verified"`
	MiBps         Summary `json:"mib_per_s"`
	RPS           Summary `json:"requests_per_s"`
	Latency       Latency `json:"latency"`
	// Errors counts failed responses by kind over the whole run
	// (warmup included): connect, tls, status, protocol, length,
	// no-length, range, truncated, too-long, digest, reset, timeout,
	// transport.
	Errors            map[string]int `json:"errors"`
	ConnectionsOpened int64          `json:"connections_opened"`
	// Tail is the responses in flight when the measured time ended: the
	// run waited for each (up to its timeout) and judged it.
	Tail Tail `json:"in_flight_at_end"`
	// CutOff is the responses an interruption cancelled unjudged; their
	// bytes are in no figure.
	CutOff      CutOff       `json:"cut_off"`
	Server      *ServerStats `json:"server,omitempty"`
	Interrupted bool         `json:"interrupted,omitempty"`
	// TCP is what the client's sockets said (TCP_INFO, h1 and h2 on
	// Linux) over the accepted samples; TCPNotMeasured says why it is
	// absent when it could not be read at all (h3: QUIC has no TCP_INFO;
	// another system).
	TCP            *TCPSummary `json:"tcp,omitempty"`
	TCPNotMeasured string      `json:"tcp_not_measured,omitempty"`
}

// Tail is what the wait after the measured time found.
type Tail struct {
	Responses int64 `json:"responses"` // finished after the end
	Failed    int64 `json:"failed"`    // of them, failed: their samples are rejected
	// Bytes of those responses that arrived after the end are in no
	// sample; their bytes that arrived before it count where they arrived.
	BytesReceived int64 `json:"bytes_received_after_end"`
	BytesVerified int64 `json:"bytes_verified_after_end"`
}

// CutOff is what an interruption left unjudged.
type CutOff struct {
	Responses     int64 `json:"responses"`
	BytesReceived int64 `json:"bytes_received"`
}

// Sample is one slice of the run.
type Sample struct {
	Received  int64          `json:"bytes_received"`
	Bytes     int64          `json:"bytes_verified"`
	Responses int64          `json:"responses"`
	Seconds   float64        `json:"seconds"`
	MiBps     float64        `json:"mib_per_s"`
	RPS       float64        `json:"requests_per_s"`
	Accepted  bool           `json:"accepted"`
	Rejected  map[string]int `json:"rejected_because,omitempty"`
	TCP       *TCPSample     `json:"tcp,omitempty"` // nil when not measured or no socket was read
}

// Summary of a figure over accepted samples.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	CV     float64 `json:"cv"` // standard deviation / mean
}

// Latency percentiles over the accepted samples' responses.
type Latency struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
}

// ServerStats is what the server process used during the run.
type ServerStats struct {
	PID        int     `json:"pid,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`    // over the samples (not the warmup)
	PeakRSS    int64   `json:"peak_rss_bytes,omitempty"` // VmHWM, over the process and its children
	// From an engine's /metrics (--admin), differences over the samples.
	Metrics *ServerMetrics `json:"metrics,omitempty"`
}

func (s *runState) report(checked string, elapsed time.Duration, interrupted bool, srv *ServerStats) *Report {
	c := s.c
	r := &Report{Command: strings.Join(os.Args, " "), Machine: machine(), Kernel: kernel(), GoVersion: runtime.Version(),
		URLs: c.URLs, Protocol: c.Protocol, Connections: c.Connections, Streams: c.Streams, Rate: c.Rate, Checked: checked,
		Errors: map[string]int{}, ConnectionsOpened: s.dials.Load(), Server: srv, Interrupted: interrupted}
	for k, v := range s.failed {
		r.Errors[k] = v
	}
	r.Tail = Tail{Responses: s.tail.responses, Failed: s.tail.failed, BytesReceived: s.tail.received, BytesVerified: s.tail.verified}
	r.CutOff = CutOff{Responses: s.cut.responses, BytesReceived: s.cut.received}
	r.BytesReceived, r.Bytes = s.tail.received, s.tail.verified
	if s.tcp == nil {
		r.TCPNotMeasured = "QUIC has no TCP_INFO"
	} else {
		r.TCPNotMeasured = s.tcp.notMeasured()
	}
	var accepted []*acc
	var acceptedTCP []*TCPSample
	var mibs, rps []float64
	for i := range s.samples {
		a := &s.samples[i]
		secs := s.sampleD.Seconds()
		if c.Requests > 0 {
			secs = elapsed.Seconds() / float64(c.Samples)
		}
		// Accepted: no failure overlapped it, every byte that arrived in
		// it was verified, and at least one verified response vouches.
		smp := Sample{Received: a.received, Bytes: a.verified, Responses: a.responses, Seconds: secs,
			Accepted: len(a.errs) == 0 && a.checked && a.received == a.verified}
		if secs > 0 {
			smp.MiBps = float64(a.verified) / (1 << 20) / secs
			smp.RPS = float64(a.responses) / secs
		}
		switch {
		case len(a.errs) > 0:
			smp.Rejected = a.errs
		case a.received != a.verified:
			smp.Rejected = map[string]int{"unjudged": 1} // bytes of responses cut off
		case !a.checked:
			smp.Rejected = map[string]int{"unverified": 1}
		}
		if interrupted && i >= s.sampleAt(time.Now()) {
			smp.Accepted = false // not run to the end
			if smp.Rejected == nil {
				smp.Rejected = map[string]int{"interrupted": 1}
			}
		}
		if s.tcp != nil && r.TCPNotMeasured == "" {
			smp.TCP = s.tcp.sample(i)
		}
		r.Samples = append(r.Samples, smp)
		r.BytesReceived += a.received
		r.Bytes += a.verified
		if smp.Accepted {
			accepted = append(accepted, a)
			acceptedTCP = append(acceptedTCP, smp.TCP)
			mibs = append(mibs, smp.MiBps)
			rps = append(rps, smp.RPS)
		}
	}
	r.Accepted = len(accepted)
	r.MiBps, r.RPS = summarize(mibs), summarize(rps)
	r.TCP = summarizeTCP(acceptedTCP)
	var lat []time.Duration
	for _, a := range accepted {
		lat = append(lat, a.lat...)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.Latency = Latency{Count: len(lat), P50: pct(lat, 0.50), P90: pct(lat, 0.90), P99: pct(lat, 0.99), P999: pct(lat, 0.999)}
	return r
}

func summarize(v []float64) Summary {
	if len(v) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	var sum, sq float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	for _, x := range s {
		sq += (x - mean) * (x - mean)
	}
	cv := 0.0
	if mean > 0 {
		cv = math.Sqrt(sq/float64(len(s))) / mean
	}
	return Summary{Median: med, Min: s[0], Max: s[len(s)-1], CV: cv}
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// WriteText prints the report for a terminal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "engine bench: %s, %d connection(s) x %d stream(s)", r.Protocol, r.Connections, r.Streams)
	if r.Rate > 0 {
		fmt.Fprintf(w, ", open loop at %.0f requests/s", r.Rate)
	}
	fmt.Fprintf(w, "\n  %s\n  machine: %s; kernel %s; %s\n  command: %s\n  checked: %s\n", strings.Join(r.URLs, " "), r.Machine, r.Kernel, r.GoVersion, r.Command, r.Checked)
	fmt.Fprintf(w, "\nsamples (%d of %d accepted):\n", r.Accepted, len(r.Samples))
	for i, s := range r.Samples {
		verdict := "accepted"
		if !s.Accepted {
			verdict = "REJECTED " + kinds(s.Rejected)
		}
		fmt.Fprintf(w, "  %2d  %10.1f MiB/s  %10.1f req/s  %s%s verified of %s received  %s\n", i+1, s.MiBps, s.RPS,
			r.tcpColumns(s.TCP), mib(s.Bytes), mib(s.Received), verdict)
	}
	fmt.Fprintf(w, "\nbytes:      %s verified of %s received (%s); figures count verified bytes only\n",
		mib(r.Bytes), mib(r.BytesReceived), share(r.Bytes, r.BytesReceived))
	if t := r.Tail; t.Responses > 0 {
		fmt.Fprintf(w, "at the end: %d response(s) in flight were finished and judged (%d failed); their %s after the end (%s verified) are in no sample\n",
			t.Responses, t.Failed, mib(t.BytesReceived), mib(t.BytesVerified))
	}
	if c := r.CutOff; c.Responses > 0 {
		fmt.Fprintf(w, "cut off:    %d response(s) cancelled in flight by the interruption; their %s are in no figure\n",
			c.Responses, mib(c.BytesReceived))
	}
	if r.Accepted > 0 {
		fmt.Fprintf(w, "\nthroughput: %.1f MiB/s median [%.1f-%.1f], CV %.3f\n", r.MiBps.Median, r.MiBps.Min, r.MiBps.Max, r.MiBps.CV)
		fmt.Fprintf(w, "requests:   %.1f req/s median [%.1f-%.1f], CV %.3f\n", r.RPS.Median, r.RPS.Min, r.RPS.Max, r.RPS.CV)
		fmt.Fprintf(w, "latency:    p50 %v  p90 %v  p99 %v  p99.9 %v  (%d responses)\n", r.Latency.P50.Round(time.Microsecond),
			r.Latency.P90.Round(time.Microsecond), r.Latency.P99.Round(time.Microsecond), r.Latency.P999.Round(time.Microsecond), r.Latency.Count)
		r.writeTCP(w)
	} else {
		fmt.Fprintf(w, "\nno accepted sample: no figures\n")
	}
	fmt.Fprintf(w, "errors:     %s\n", kindsOrNone(r.Errors))
	fmt.Fprintf(w, "connections opened: %d\n", r.ConnectionsOpened)
	if r.Server != nil && r.Server.PID > 0 {
		fmt.Fprintf(w, "server (pid %d): %.2f CPU s, peak RSS %.1f MiB\n", r.Server.PID, r.Server.CPUSeconds, float64(r.Server.PeakRSS)/(1<<20))
	}
	if r.Server != nil && r.Server.Metrics != nil {
		r.Server.Metrics.write(w)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "interrupted: figures cover what was measured before")
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func share(part, whole int64) string {
	if whole == 0 {
		return "nothing received"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

func kinds(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func kindsOrNone(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	return kinds(m)
}

// WriteJSON prints the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteSVG draws the samples' throughput as bars (accepted in green,
// rejected in red) with the median as a line.
func (r *Report) WriteSVG(w io.Writer) error {
	const width, height, pad = 640, 320, 40
	maxV := 1.0
	for _, s := range r.Samples {
		maxV = math.Max(maxV, s.MiBps)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20">%s %s, %d conn x %d: MiB/s per sample (median %.1f)</text>`+"\n", pad, r.Protocol,
		xmlEscape(strings.Join(r.URLs, " ")), r.Connections, r.Streams, r.MiBps.Median)
	n := max(len(r.Samples), 1)
	bw := float64(width-2*pad) / float64(n)
	for i, s := range r.Samples {
		h := s.MiBps / maxV * float64(height-2*pad)
		color := "#3a3"
		if !s.Accepted {
			color = "#c33"
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>sample %d: %.1f MiB/s %s</title></rect>`+"\n",
			float64(pad)+float64(i)*bw+2, float64(height-pad)-h, bw-4, h, color, i+1, s.MiBps, xmlEscape(kinds(s.Rejected)))
	}
	if r.Accepted > 0 {
		y := float64(height-pad) - r.MiBps.Median/maxV*float64(height-2*pad)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#333" stroke-dasharray="4"/>`+"\n", pad, width-pad, y, y)
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#000"/>`+"\n", pad, width-pad, height-pad, height-pad)
	fmt.Fprintf(&b, `<text x="%d" y="%d">0</text><text x="5" y="%d">%.0f</text>`+"\n", pad-12, height-pad, pad, maxV)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

func machine() string {
	name, _ := os.Hostname()
	return fmt.Sprintf("%s, %d CPUs, %s/%s", name, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

func kernel() string {
	out, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// serverWatch samples a process's CPU time, and an engine's metrics, at
// the start and at the end.
type serverWatch struct {
	pid   int
	ticks int64
	admin string
	first metricValues
	err   error
}

func startServerStats(pid int, admin string) *serverWatch {
	if pid <= 0 && admin == "" {
		return nil
	}
	w := &serverWatch{pid: pid, admin: admin}
	if pid > 0 {
		w.ticks = procTicks(pid)
	}
	if admin != "" {
		w.first, w.err = readMetrics(admin)
	}
	return w
}

func (w *serverWatch) finish() *ServerStats {
	if w == nil {
		return nil
	}
	st := &ServerStats{}
	if w.pid > 0 {
		st.PID, st.CPUSeconds, st.PeakRSS = w.pid, float64(procTicks(w.pid)-w.ticks)/100, procHWM(w.pid)
	}
	if w.admin != "" {
		st.Metrics = metricsDelta(w.admin, w.first, w.err)
	}
	return st
}

// family is pid and its child processes (nginx's workers).
func family(pid int) []int {
	out := []int{pid}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// ProcessCPU is the user and system CPU time pid and its child processes
// (nginx's workers) have used so far, from /proc; 0 where it cannot be
// read.
func ProcessCPU(pid int) time.Duration {
	return time.Duration(procTicks(pid)) * 10 * time.Millisecond // USER_HZ = 100
}

// procTicks is utime+stime in clock ticks (USER_HZ, 100 on Linux).
func procTicks(pid int) int64 {
	var total int64
	for _, p := range family(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			total += u + st
		}
	}
	return total
}

func procHWM(pid int) int64 {
	var total int64
	for _, p := range family(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}
