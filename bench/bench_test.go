package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/testnet"
	"github.com/quic-go/quic-go/http3"
)

var body = bytes.Repeat([]byte("integrity-gated "), 64<<10) // 1 MiB

func digestOf(b []byte) integrity.Digest {
	d, _, _ := integrity.Sum(bytes.NewReader(b))
	return d
}

// misbehave serves body correctly except on every nth request, which gets
// the fault.
func misbehave(t *testing.T, fault string, every int64) string {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		bad := every > 0 && k%every == 0
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if !bad {
			w.Write(body)
			return
		}
		switch fault {
		case "short":
			w.Write(body[:len(body)-100])
			panic(http.ErrAbortHandler)
		case "flip":
			b := bytes.Clone(body)
			b[len(b)/3] ^= 0x20
			w.Write(b)
		case "status":
			w.WriteHeader(500)
			w.Write(body)
		case "reset":
			w.Write(body[:1000])
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		case "trickle":
			for i := 0; i < 50; i++ {
				w.Write(body[:10])
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		case "slow": // right bytes, paced over about a second
			for i := 0; i < 8; i++ {
				w.Write(body[i*len(body)/8 : (i+1)*len(body)/8])
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		case "long": // no Content-Length (chunked), and more than the file
			w.Header().Del("Content-Length")
			w.Write(body)
			w.Write(body[:4096])
		case "lie": // announces 10 bytes fewer than it sends
			conn, bw, _ := w.(http.Hijacker).Hijack()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body)-10)
			bw.Write(body)
			bw.Flush()
			conn.Close()
		}
	}))
	t.Cleanup(s.Close)
	return s.URL + "/f.bin"
}

func run(t *testing.T, c Config) *Report {
	t.Helper()
	d := digestOf(body)
	c.ExpectDigest, c.ExpectSize, c.RangeLast = &d, int64(len(body)), -1
	if c.Duration == 0 && c.Requests == 0 {
		c.Duration = 2 * time.Second
	}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCorrectServer(t *testing.T) {
	r := run(t, Config{URLs: []string{misbehave(t, "", 0)}, Connections: 4, Samples: 4})
	if r.Accepted != 4 || len(r.Errors) != 0 {
		t.Fatalf("accepted %d, errors %v", r.Accepted, r.Errors)
	}
	if r.MiBps.Median <= 0 || r.RPS.Median <= 0 || r.Latency.Count == 0 || r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50 {
		t.Errorf("figures: %+v %+v %+v", r.MiBps, r.RPS, r.Latency)
	}
	// Throughput and request rate agree with the body size.
	if got := r.MiBps.Median / r.RPS.Median; got < 0.9 || got > 1.1 {
		t.Errorf("MiB per response %.2f, want about 1", got)
	}
	if r.ConnectionsOpened != 4 {
		t.Errorf("connections opened %d, want 4 (kept alive)", r.ConnectionsOpened)
	}
	var text strings.Builder
	r.WriteText(&text)
	for _, w := range []string{"4 of 4 accepted", "throughput:", "latency:", "errors:     none", "connections opened: 4", "checked: status, length and the given BLAKE3 digest"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
}

// TestSlowResponseSpansSamples: a response longer than a sample vouches
// for every sample it streamed in once it passes its checks, so slow
// transfers of large files are measured rather than rejected as unverified.
func TestSlowResponseSpansSamples(t *testing.T) {
	r := run(t, Config{URLs: []string{misbehave(t, "slow", 1)}, Connections: 1, Samples: 8})
	spanned := 0
	for _, s := range r.Samples {
		if s.Accepted && s.Responses == 0 {
			spanned++
		}
		if !s.Accepted && s.Rejected["unverified"] == 0 {
			t.Errorf("sample rejected for %v, want only unverified", s.Rejected)
		}
	}
	if spanned == 0 || len(r.Errors) != 0 {
		t.Fatalf("no sample accepted on the strength of a response that finished later; errors %v, samples %+v", r.Errors, r.Samples)
	}
}

// TestOtherProtocols: the h2 and h3 clients, with several streams on each
// connection, against real HTTP/2 and HTTP/3 servers; a corrupt body is
// caught on each; asking an HTTP/1.1-only server for h2 is an error, not a
// silent fallback.
func TestOtherProtocols(t *testing.T) {
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := body
		if r.URL.Path == "/bad" && n.Add(1)%3 == 0 {
			b = bytes.Clone(body)
			b[12345] ^= 1
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)

	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h3 := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: h2.TLS.Certificates})}
	go h3.Serve(udp)
	t.Cleanup(func() { h3.Close() })
	h3URL := "https://" + udp.LocalAddr().String()

	h1 := httptest.NewTLSServer(h) // no HTTP/2
	t.Cleanup(h1.Close)

	for _, tt := range []struct{ proto, base string }{{"h2", h2.URL}, {"h3", h3URL}} {
		t.Run(tt.proto, func(t *testing.T) {
			r := run(t, Config{URLs: []string{tt.base + "/f.bin"}, Protocol: tt.proto, Connections: 2, Streams: 4, Samples: 2, Insecure: true})
			if r.Accepted != 2 || len(r.Errors) != 0 || r.RPS.Median <= 0 {
				t.Fatalf("accepted %d, errors %v, %.1f req/s", r.Accepted, r.Errors, r.RPS.Median)
			}
			if r.ConnectionsOpened != 2 {
				t.Errorf("connections opened %d, want 2 (streams share them)", r.ConnectionsOpened)
			}
			var text strings.Builder
			r.WriteText(&text)
			if tt.proto == "h3" || runtime.GOOS != "linux" {
				// No TCP_INFO: said so, never zeros.
				if r.TCPNotMeasured == "" || r.TCP != nil || r.Samples[0].TCP != nil || !strings.Contains(text.String(), "tcp:        not measured (") {
					t.Errorf("%s: tcp %+v, not measured %q, sample %+v; text:\n%s", tt.proto, r.TCP, r.TCPNotMeasured, r.Samples[0].TCP, text.String())
				}
			} else if r.TCP == nil || r.TCPNotMeasured != "" || r.Samples[0].TCP == nil || r.Samples[0].TCP.Sockets != 2 {
				t.Errorf("%s: tcp %+v, not measured %q, sample %+v, want 2 sockets read", tt.proto, r.TCP, r.TCPNotMeasured, r.Samples[0].TCP)
			}
			r = run(t, Config{URLs: []string{tt.base + "/bad"}, Protocol: tt.proto, Connections: 1, Streams: 2, Samples: 2, Insecure: true})
			if r.Errors["digest"] == 0 || r.Accepted == len(r.Samples) {
				t.Errorf("corrupt bodies over %s: errors %v, accepted %d of %d", tt.proto, r.Errors, r.Accepted, len(r.Samples))
			}
		})
	}
	r := run(t, Config{URLs: []string{h1.URL + "/f.bin"}, Protocol: "h2", Connections: 1, Samples: 1, Insecure: true, Duration: 500 * time.Millisecond})
	if r.Errors["protocol"] == 0 || r.Accepted != 0 {
		t.Errorf("h2 asked of an HTTP/1.1 server: errors %v, accepted %d", r.Errors, r.Accepted)
	}
}

// TestKeyExchangesReported: every TLS response is counted by the key
// exchange its connection negotiated: Go's default with a Go server
// (X25519MLKEM768, over TCP and QUIC), X25519 with a server that allows
// only it; a plain run has none.
func TestKeyExchangesReported(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	pq := httptest.NewTLSServer(h)
	t.Cleanup(pq.Close)
	classic := httptest.NewUnstartedServer(h)
	classic.TLS = &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}
	classic.StartTLS()
	t.Cleanup(classic.Close)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h3 := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: pq.TLS.Certificates})}
	go h3.Serve(udp)
	t.Cleanup(func() { h3.Close() })
	for _, tc := range []struct {
		url, proto string
		newConns   bool
		offer      []tls.CurveID // Config.KeyExchanges
		want       string
	}{
		{pq.URL, "h1", true, nil, "X25519MLKEM768"},
		{pq.URL, "h1", true, []tls.CurveID{tls.X25519}, "X25519"},
		{classic.URL, "h1", true, nil, "X25519"},
		{classic.URL, "h2", false, nil, "X25519"},
		{"https://" + udp.LocalAddr().String(), "h3", false, nil, "X25519MLKEM768"},
		{"https://" + udp.LocalAddr().String(), "h3", false, []tls.CurveID{tls.CurveP256}, "P-256"},
	} {
		r := run(t, Config{URLs: []string{tc.url + "/f.bin"}, Protocol: tc.proto, Samples: 1, Insecure: true, Duration: 300 * time.Millisecond,
			NewConnectionPerRequest: tc.newConns, KeyExchanges: tc.offer})
		var responses int64
		for _, n := range r.KeyExchanges {
			responses += n
		}
		if len(r.KeyExchanges) != 1 || r.KeyExchanges[tc.want] == 0 {
			t.Errorf("%s %s: key exchanges %v, want %s only", tc.proto, tc.url, r.KeyExchanges, tc.want)
		}
		var text strings.Builder
		r.WriteText(&text)
		if want := "TLS key exchange: " + tc.want + " ×"; !strings.Contains(text.String(), want) {
			t.Errorf("%s %s: text report lacks %q:\n%s", tc.proto, tc.url, want, text.String())
		}
	}
	r := run(t, Config{URLs: []string{misbehave(t, "", 0)}, Samples: 1, Duration: 300 * time.Millisecond})
	if r.KeyExchanges != nil {
		t.Errorf("plain HTTP: key exchanges %v, want none", r.KeyExchanges)
	}
}

func TestLookupKeyExchange(t *testing.T) {
	for _, tc := range []struct {
		in, name string
		id       tls.CurveID
	}{
		{"x25519", "X25519", tls.X25519},
		{"prime256v1", "P-256", tls.CurveP256},
		{"secp384r1", "P-384", tls.CurveP384},
		{"X25519MLKEM768", "X25519MLKEM768", tls.X25519MLKEM768},
		{"p-521", "P-521", tls.CurveP521},
		{"X448", "", 0},
	} {
		name, id, ok := LookupKeyExchange(tc.in)
		if name != tc.name || id != tc.id || ok != (tc.name != "") {
			t.Errorf("LookupKeyExchange(%q) = %q, %v, %v; want %q, %v", tc.in, name, id, ok, tc.name, tc.id)
		}
		if ok && keyExchangeName(id) != name {
			t.Errorf("keyExchangeName(%v) = %q, want %q", id, keyExchangeName(id), name)
		}
	}
}

// TestClientStats: the report carries this process's CPU over the
// samples, what it verified meanwhile, and how many CPUs its work could
// use.
func TestClientStats(t *testing.T) {
	r := run(t, Config{URLs: []string{misbehave(t, "", 0)}, Connections: 1, Samples: 2, Duration: time.Second})
	c := r.Client
	if runtime.GOOS == "windows" {
		if c != nil {
			t.Errorf("client stats on Windows: %+v", c)
		}
		return
	}
	if c == nil || c.CPUSeconds <= 0 || c.Seconds < 0.9 || c.Responses == 0 || c.Bytes != r.Bytes || c.Busy() <= 0 {
		t.Fatalf("client stats %+v (busy %.2f), report bytes %d", c, c.Busy(), r.Bytes)
	}
	// body is longer than a read buffer: a hasher beside the reader.
	if want := min(2, runtime.NumCPU()); c.Parallelism != want {
		t.Errorf("parallelism %d, want %d", c.Parallelism, want)
	}
	var text strings.Builder
	r.WriteText(&text)
	if !strings.Contains(text.String(), "client (this process): ") {
		t.Errorf("text report lacks the client's CPU:\n%s", text.String())
	}
	for _, tc := range []struct {
		proto          string
		conns, streams int
		pipelined      bool
		cpus, want     int
	}{
		{"h1", 1, 1, false, 8, 1},
		{"h1", 1, 1, true, 8, 2},
		{"h1", 64, 1, false, 2, 2},
		{"h2", 1, 16, true, 64, 33},
		{"h3", 1, 1, true, 8, 3},
		{"h2", 4, 32, false, 2, 2},
	} {
		if got := clientParallelism(tc.proto, tc.conns, tc.streams, tc.pipelined, tc.cpus); got != tc.want {
			t.Errorf("clientParallelism(%s, %d, %d, %v, %d) = %d, want %d", tc.proto, tc.conns, tc.streams, tc.pipelined, tc.cpus, got, tc.want)
		}
	}
}

// TestMisbehavingServers: each fault is caught, named, and its sample
// rejected; the figures come only from clean samples.
func TestMisbehavingServers(t *testing.T) {
	for _, tt := range []struct {
		fault, kind string
		timeout     time.Duration
	}{
		{"short", "truncated", 0},
		{"flip", "digest", 0},
		{"status", "status", 0},
		{"reset", "reset", 0},
		{"trickle", "timeout", 500 * time.Millisecond},
		{"lie", "length", 0},
		{"long", "too-long", 0},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			r := run(t, Config{URLs: []string{misbehave(t, tt.fault, 7)}, Connections: 1, Samples: 4, Timeout: tt.timeout,
				Duration: 3 * time.Second})
			if r.Errors[tt.kind] == 0 {
				t.Fatalf("errors %v, want %s", r.Errors, tt.kind)
			}
			rejected := 0
			for _, s := range r.Samples {
				if !s.Accepted {
					rejected++
					if s.Rejected[tt.kind] == 0 && s.Rejected["unverified"] == 0 {
						t.Errorf("rejected sample without the reason: %v", s.Rejected)
					}
				}
			}
			if rejected == 0 {
				t.Error("no sample rejected")
			}
			if r.Accepted+rejected != len(r.Samples) {
				t.Errorf("accepted %d + rejected %d != %d", r.Accepted, rejected, len(r.Samples))
			}
		})
	}
	// Every response wrong: no accepted sample, no figures.
	r := run(t, Config{URLs: []string{misbehave(t, "flip", 1)}, Samples: 2, Duration: time.Second})
	if r.Accepted != 0 || r.MiBps.Median != 0 {
		t.Errorf("all wrong: accepted %d, median %.1f", r.Accepted, r.MiBps.Median)
	}
}

func TestUnreachable(t *testing.T) {
	addr := testnet.RefusedAddr(t)
	r := run(t, Config{URLs: []string{"http://" + addr + "/x"}, Samples: 2, Duration: 500 * time.Millisecond})
	if r.Errors["connect"] == 0 || r.Accepted != 0 {
		t.Errorf("errors %v accepted %d", r.Errors, r.Accepted)
	}
	// TLS to a plain server: a TLS failure.
	plain := misbehave(t, "", 0)
	r = run(t, Config{URLs: []string{strings.Replace(plain, "http://", "https://", 1)}, Samples: 2, Duration: 500 * time.Millisecond})
	if r.Errors["tls"] == 0 && r.Errors["transport"] == 0 {
		t.Errorf("https to plain: errors %v", r.Errors)
	}
}

// TestOpenLoop: at a fixed rate, about rate x duration responses, and
// latencies measured from the schedule.
// TestOpenLoop: at a fixed rate the schedule, not the server, decides
// what is sent and when latency starts. The server holds two requests
// 600 ms (the first, and the one due 200 ms before the end) on the only
// connection, so others fall due behind them: every sample still holds
// rate x its length of requests, all of them sent and answered (those
// due before the end as well, though sent after it), and the latency of
// the ones that waited counts the wait. Only what the schedule fixes is
// asserted; the throughput measured is not.
func TestOpenLoop(t *testing.T) {
	const rate, samples, duration, hold = 50, 2, 2 * time.Second, 600 * time.Millisecond
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := n.Add(1); k == 1 || k == rate*int64(duration/time.Second)-9 {
			time.Sleep(hold)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	r := run(t, Config{URLs: []string{s.URL + "/f.bin"}, Connections: 1, Samples: samples, Rate: rate, Duration: duration})
	if r.Accepted != samples || len(r.Errors) != 0 {
		t.Fatalf("accepted %d of %d, errors %v", r.Accepted, samples, r.Errors)
	}
	perSample := rate * duration.Seconds() / samples
	var scheduled, answered int64
	for i, smp := range r.Samples {
		if d := float64(smp.Scheduled) - perSample; d < -1 || d > 1 {
			t.Errorf("sample %d: %d requests due, want %.0f ± 1", i+1, smp.Scheduled, perSample)
		}
		scheduled += smp.Scheduled
		answered += smp.Responses
	}
	t.Logf("due per sample %v, answered %d (%d after the end), latency p50 %v p90 %v",
		[]int64{r.Samples[0].Scheduled, r.Samples[1].Scheduled}, answered+r.Tail.Responses, r.Tail.Responses, r.Latency.P50, r.Latency.P90)
	// Those due near the end waited behind the second held request and
	// were answered after the end: the run sent them all the same.
	if answered += r.Tail.Responses; answered != scheduled || int64(n.Load()) != scheduled {
		t.Errorf("%d requests due, %d sent, %d answered (%d after the end): want every one due sent and answered",
			scheduled, n.Load(), answered, r.Tail.Responses)
	}
	// 25 requests fall due in the first 500 ms, while the first is held:
	// each waited 100 ms or more; with the first held request and those
	// behind the second, more than 10% of them. Latency counted from
	// when a request was sent would show one slow response.
	if r.Latency.P90 < 100*time.Millisecond {
		t.Errorf("latency p90 %v with over 10%% of requests queued 100 ms or more behind a held one: not counted from the schedule", r.Latency.P90)
	}
}

func TestRequestsModeAndNewConnections(t *testing.T) {
	r := run(t, Config{URLs: []string{misbehave(t, "", 0)}, Requests: 40, Samples: 4, NewConnectionPerRequest: true})
	if r.Accepted != 4 || r.Latency.Count != 40 {
		t.Fatalf("accepted %d, responses %d", r.Accepted, r.Latency.Count)
	}
	if r.ConnectionsOpened < 40 {
		t.Errorf("connections opened %d, want one per request", r.ConnectionsOpened)
	}
}

func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	d := digestOf(body)
	r, err := Run(ctx, Config{URLs: []string{misbehave(t, "", 0)}, Samples: 4, Duration: 10 * time.Second,
		ExpectDigest: &d, ExpectSize: int64(len(body)), RangeLast: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.Accepted == len(r.Samples) {
		t.Errorf("interrupted %v, accepted %d of %d", r.Interrupted, r.Accepted, len(r.Samples))
	}
}

// TestOnSamples: the caller's readings open when the samples start,
// after the warmup, and close once they end; a run interrupted during
// its warmup makes neither.
func TestOnSamples(t *testing.T) {
	const warmup, duration = 300 * time.Millisecond, time.Second
	var began, ended time.Time
	calls := 0
	start := time.Now()
	run(t, Config{URLs: []string{misbehave(t, "", 0)}, Samples: 2, Warmup: warmup, Duration: duration,
		OnSamples: func() func() {
			calls++
			began = time.Now()
			return func() { calls++; ended = time.Now() }
		}})
	// The samples end no earlier than warmup + duration after Run began
	// (its timer may fire late, so the samples may be a little shorter
	// than duration).
	if calls != 2 || began.Sub(start) < warmup || ended.Sub(start) < warmup+duration {
		t.Errorf("OnSamples: %d calls, began %v and ended %v after the start; want 2 calls, at least %v and %v",
			calls, began.Sub(start), ended.Sub(start), warmup, warmup+duration)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	d := digestOf(body)
	if _, err := Run(ctx, Config{URLs: []string{misbehave(t, "", 0)}, Samples: 2, Warmup: 5 * time.Second, Duration: time.Second,
		ExpectDigest: &d, ExpectSize: int64(len(body)), RangeLast: -1,
		OnSamples: func() func() { t.Error("OnSamples called during the warmup"); return nil }}); err != nil {
		t.Fatal(err)
	}
}

func TestSelfCheck(t *testing.T) {
	r, err := SelfCheck(context.Background(), Config{Duration: time.Second, Samples: 2, Connections: 2}, 4<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Accepted != 2 || r.MiBps.Median <= 0 {
		t.Errorf("self-check: accepted %d, %.1f MiB/s, errors %v", r.Accepted, r.MiBps.Median, r.Errors)
	}
	r, err = SelfCheck(context.Background(), Config{Duration: time.Second, Samples: 2}, 1<<20, true)
	if err != nil || r.Accepted != 2 {
		t.Errorf("self-check over TLS: %v, accepted %d, errors %v", err, r.Accepted, r.Errors)
	}
}

func TestSVG(t *testing.T) {
	r := &Report{Protocol: "h1", URLs: []string{"http://x/<a>"}, Connections: 1, Streams: 1, Accepted: 1,
		MiBps:   Summary{Median: 5},
		Samples: []Sample{{MiBps: 5, Accepted: true}, {MiBps: 3, Rejected: map[string]int{"digest": 1}}}}
	var b bytes.Buffer
	r.WriteSVG(&b)
	s := b.String()
	if !strings.HasPrefix(s, "<svg") || strings.Count(s, "<rect") != 2 || !strings.Contains(s, "#c33") || strings.Contains(s, "<a>") {
		t.Errorf("svg:\n%s", s)
	}
	_ = fmt.Sprint
}
