package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/testtool"
)

// Headless Chromium as a client (docs/BROWSERS.md): driven over the
// DevTools protocol by chromedp, every step under a deadline. The tests
// wait on what the page itself reports (a promise that settles, a
// property it sets), never on a virtual clock: --virtual-time-budget
// would let the page's timers run ahead of network work.

// chrome is one headless Chromium and its first tab.
type chrome struct {
	ctx  context.Context
	logs *syncBuffer // the page's console and the browser's own output
}

// newChrome starts headless Chromium with the given command-line flags
// (name to value; true for a bare switch) in a profile of its own, and
// stops it at test end. Chromium comes from Debian (.ci/run installs it).
func newChrome(t *testing.T, flags map[string]any) *chrome {
	t.Helper()
	return newChromeEnv(t, flags)
}

// newChromeEnv is newChrome with environment variables ("NAME=value")
// added to the browser's.
func newChromeEnv(t *testing.T, flags map[string]any, env ...string) *chrome {
	t.Helper()
	bin := testtool.Require(t, "chromium")
	logs := &syncBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI: Chromium's sandbox refuses to run as root
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 800),
		chromedp.CombinedOutput(logs),
		chromedp.Env(env...),
	)
	for k, v := range flags {
		opts = append(opts, chromedp.Flag(k, v))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				args = append(args, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			fmt.Fprintf(logs, "console.%s: %s\n", ev.Type, strings.Join(args, " "))
		case *cdplog.EventEntryAdded:
			// The browser's own messages: a Content-Security-Policy
			// violation, a failed load, a deprecation.
			fmt.Fprintf(logs, "browser %s (%s): %s %s\n", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			what := d.Text
			if d.Exception != nil {
				what += " " + d.Exception.Description
			}
			fmt.Fprintf(logs, "exception at %s:%d: %s\n", d.URL, d.LineNumber, what)
		}
	}))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium's output and the page's console:\n%s", logs.String())
		}
	})
	// The first Run starts the browser and binds it to ctx (a deadline on
	// it would stop the browser when it passed): the start is timed here.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start chromium: %v\n%s", err, logs.String())
		}
	case <-time.After(scale(60 * time.Second)):
		t.Fatalf("chromium did not start within %v\n%s", scale(60*time.Second), logs.String())
	}
	return &chrome{ctx: ctx, logs: logs}
}

// run runs actions within d (scaled); what names the step in a failure.
func (c *chrome) run(t *testing.T, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, scale(d))
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs action a within d (scaled) and returns its value.
func value[T any](t *testing.T, c *chrome, d time.Duration, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, scale(d))
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval evaluates the JavaScript expression js in the page, waits for the
// promise it returns (within d), and decodes the JSON string it settles
// with into out.
func (c *chrome) eval(t *testing.T, d time.Duration, what, js string, out any) {
	t.Helper()
	s := value(t, c, d, what, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err := json.Unmarshal([]byte(s), out); err != nil {
		t.Fatalf("%s: the page returned %q: %v", what, s, err)
	}
}

// shortCert writes a self-signed ECDSA P-256 certificate valid for
// validFor (what browsers take by hash: at most 14 days) for localhost
// and the loopback addresses, and returns its files and the hex SHA-256
// of its DER and the base64 SHA-256 of its public key (what
// --ignore-certificate-errors-spki-list takes).
func shortCert(t *testing.T, validFor time.Duration) (certFile, keyFile, certHash, spki string) {
	t.Helper()
	cert, err := selfsigned.New("browser test", validFor, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, err := selfsigned.PEM(cert)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, string(cp))
	writeFile(t, keyFile, string(kp))
	sum := sha256.Sum256(cert.Leaf.Raw)
	pk := sha256.Sum256(cert.Leaf.RawSubjectPublicKeyInfo)
	return certFile, keyFile, hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(pk[:])
}

// localhostTLS is the head of the browser tests' TLS configurations:
// listen on localhost (both loopback addresses: Chromium tries ::1 first,
// and over UDP it does not fall back), kernel TLS where the kernel has
// it, and one default site serving root with the certificate.
func localhostTLS(root, certFile, keyFile string) string {
	return fmt.Sprintf("listen = \"localhost:0\"\n"+ktlsAuto+"[[sites]]\ndomain = \"localhost\"\ndefault = true\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n",
		root, certFile, keyFile)
}

// accessLines reads a JSON access log (until it has at least n lines or
// d passes: lines are written as responses finish).
func accessLines(t *testing.T, path string, n int, d time.Duration) []map[string]any {
	t.Helper()
	var out []map[string]any
	waitFor(scale(d), func() bool {
		b, _ := os.ReadFile(path)
		out = out[:0]
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				out = append(out, m)
			}
		}
		return len(out) >= n
	})
	return out
}

// wtPageJS is the script of the WebTransport tests' page: wt(query, hash)
// opens a session on the endpoint at window.wtBase, by the certificate's
// hash when hash is set; pattern(p, n) is n bytes of the endpoint's
// generated pattern from byte p (docs/WEBTRANSPORT.md), written here
// with BigInt, apart from the diagnostics page's.
const wtPageJS = `
window.wt = async (query, hash) => {
  const opts = hash ? { serverCertificateHashes: [{ algorithm: "sha-256",
    value: Uint8Array.from(hash.match(/../g), (h) => parseInt(h, 16)) }] } : {};
  const s = new WebTransport(window.wtBase + "?" + query, opts);
  await s.ready;
  return s;
};
window.pattern = (p, n) => {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++, p++) {
    const w = (BigInt(Math.floor(p / 8)) * 0x9E3779B97F4A7C15n) & 0xFFFFFFFFFFFFFFFFn;
    out[i] = Number((w >> BigInt(8 * (p % 8))) & 0xFFn);
  }
  return out;
};
window.readAll = async (readable) => {
  const r = readable.getReader(), parts = [];
  let n = 0;
  for (;;) {
    const { value, done } = await r.read();
    if (done) break;
    parts.push(value);
    n += value.length;
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
};
window.same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
"ok"`

// TestBrowserWebTransport: Chromium opens WebTransport sessions from a
// page the engine serves, to the engine's endpoint, trusting the
// endpoint's certificate only by its hash (serverCertificateHashes): a
// 10-day ECDSA P-256 certificate no root vouches for. The page is served
// over plain HTTP on loopback, a secure context, so no command-line
// switch trusts anything: without the hash the session fails, and a
// 15-day certificate is refused even with it. Echo streams and
// datagrams, mode=source with every byte checked in the page, an Origin
// the endpoint refuses, and close codes and reasons both ways, as the
// browser reports them.
func TestBrowserWebTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium: -short")
	}
	pageRoot := t.TempDir()
	writeFile(t, filepath.Join(pageRoot, "wt.html"), "<!doctype html><title>WebTransport test page</title><p>WebTransport test page</p>\n")
	page := start(t, fmt.Sprintf("root = %q\n", pageRoot))
	_, port, _ := strings.Cut(page.addr, ":")
	origin := "http://127.0.0.1:" + port

	certFile, keyFile, hash, _ := shortCert(t, 10*24*time.Hour)
	log := &syncBuffer{}
	// On localhost: Chromium tries ::1 first, and over UDP it does not
	// fall back to 127.0.0.1 (the engine answers on both).
	ts := startLog(t, localhostTLS(t.TempDir(), certFile, keyFile)+fmt.Sprintf(`[webtransport]
enabled = true
allowed_origins = [%q]
max_bytes_per_session = "64MiB"
max_datagram_bytes = 1000
idle_timeout = "5s"
`, origin), log)
	base := "https://localhost:" + portOf(ts.addr) + "/.well-known/engine/diagnostics"

	c := newChrome(t, nil)
	c.run(t, 30*time.Second, "open the test page", chromedp.Navigate(origin+"/wt.html"))
	c.run(t, 10*time.Second, "load the page's script", chromedp.Evaluate[chromedp.Void](wtPageJS+fmt.Sprintf(";window.wtBase=%q;'ok'", base)))

	t.Run("without the hash the browser refuses the certificate", func(t *testing.T) {
		var r struct {
			Opened bool
			Error  string
		}
		c.eval(t, 30*time.Second, "open without the hash", `(async () => {
  try { const s = await wt("mode=echo", ""); s.close(); return JSON.stringify({ opened: true }); }
  catch (e) { return JSON.stringify({ opened: false, error: e.name + ": " + e.message }); }
})()`, &r)
		if r.Opened {
			t.Fatal("a session opened to a certificate nothing vouches for, without its hash: the test proves nothing about hashes")
		}
		t.Logf("without the hash: %s", r.Error)
	})

	t.Run("echo", func(t *testing.T) {
		var r struct {
			Streams   []bool
			Datagrams int
			Sent      int
			Closed    struct {
				Code   int
				Reason string
			}
		}
		c.eval(t, 60*time.Second, "echo streams and datagrams", fmt.Sprintf(`(async () => {
  const s = await wt("mode=echo", %q);
  const one = async (n) => {
    const bs = await s.createBidirectionalStream();
    const data = crypto.getRandomValues(new Uint8Array(n > 65536 ? 65536 : n));
    const big = new Uint8Array(n);
    for (let at = 0; at < n; at += data.length) big.set(data.subarray(0, Math.min(data.length, n - at)), at);
    const w = bs.writable.getWriter();
    const back = readAll(bs.readable);
    await w.write(big);
    await w.close();
    return same(await back, big);
  };
  const streams = await Promise.all([one(13000), one(1 << 20), one(1)]);
  const size = s.datagrams.maxDatagramSize < 900 ? s.datagrams.maxDatagramSize : 900;
  const r = s.datagrams.readable.getReader();
  const seen = new Set();
  const reading = (async () => {
    for (;;) {
      const { value, done } = await r.read();
      if (done) return;
      if (value.length === size && value[1] === 0xAB) seen.add(value[0]);
      if (seen.size === 50) return;
    }
  })();
  const w = s.datagrams.writable.getWriter();
  for (let i = 0; i < 50; i++) { const d = new Uint8Array(size); d[0] = i; d[1] = 0xAB; await w.write(d); }
  // Within idle_timeout (5 s): datagrams lost under load leave the
  // session idle while the page waits for them.
  await Promise.race([reading, new Promise((ok) => setTimeout(ok, 3000))]);
  s.close({ closeCode: 7, reason: "done here" });
  const info = await s.closed;
  return JSON.stringify({ streams, datagrams: seen.size, sent: 50, closed: { code: info.closeCode, reason: info.reason } });
})()`, hash), &r)
		for i, same := range r.Streams {
			if !same {
				t.Errorf("echo stream %d came back different", i)
			}
		}
		// Loopback loses no datagram unless a buffer overflows; a few
		// lost would be QUIC's right, none arriving is a failure.
		if r.Datagrams < r.Sent/2 {
			t.Errorf("%d of %d datagrams echoed", r.Datagrams, r.Sent)
		}
		t.Logf("echo: streams %v, %d of %d datagrams back; the browser's close: %+v", r.Streams, r.Datagrams, r.Sent, r.Closed)
		if !waitFor(scale(5*time.Second), func() bool {
			return strings.Contains(log.String(), `by=client code=7 reason="done here"`)
		}) {
			t.Errorf("the server did not log the browser's close (code 7, \"done here\"):\n%s", log.String())
		}
	})

	t.Run("source, every byte checked in the page", func(t *testing.T) {
		const n = 3<<20 + 5
		var r struct {
			Bytes    int
			Verified bool
			Header   string
		}
		c.eval(t, 120*time.Second, "mode=source", fmt.Sprintf(`(async () => {
  const s = await wt("mode=source&bytes=%d", %q);
  const u = s.incomingUnidirectionalStreams.getReader();
  const { value: stream } = await u.read();
  const got = await readAll(stream);
  const verified = same(got, pattern(0, %d));
  s.close({ closeCode: 0, reason: "" });
  return JSON.stringify({ bytes: got.length, verified });
})()`, n, hash, n), &r)
		if r.Bytes != n || !r.Verified {
			t.Errorf("mode=source: the page received %d bytes (want %d), verified %v", r.Bytes, n, r.Verified)
		}
	})

	t.Run("the server's close code and reason", func(t *testing.T) {
		var r struct {
			Code   int
			Reason string
			Error  string
		}
		c.eval(t, 30*time.Second, "an idle session", fmt.Sprintf(`(async () => {
  const s = await wt("mode=echo", %q);
  try { const info = await s.closed; return JSON.stringify({ code: info.closeCode, reason: info.reason }); }
  catch (e) { return JSON.stringify({ error: e.name + ": " + e.message }); }
})()`, hash), &r)
		if r.Code != 0x100 || !strings.HasPrefix(r.Reason, "idle_timeout") {
			t.Errorf("the browser reports the idle session's close as %+v, want code 0x100 (256) and reason idle_timeout", r)
		}
		t.Logf("idle close as the browser reports it: code %#x, reason %q", r.Code, r.Reason)
	})

	t.Run("an Origin the endpoint refuses", func(t *testing.T) {
		// The same page from another origin: localhost is not 127.0.0.1.
		other := "http://localhost:" + port
		c.run(t, 30*time.Second, "open the page from "+other, chromedp.Navigate(other+"/wt.html"))
		c.run(t, 10*time.Second, "load the page's script", chromedp.Evaluate[chromedp.Void](wtPageJS+fmt.Sprintf(";window.wtBase=%q;'ok'", base)))
		var r struct {
			Opened bool
			Error  string
		}
		c.eval(t, 30*time.Second, "open from a refused origin", fmt.Sprintf(`(async () => {
  try { const s = await wt("mode=echo", %q); s.close(); return JSON.stringify({ opened: true }); }
  catch (e) { return JSON.stringify({ opened: false, error: e.name + ": " + e.message }); }
})()`, hash), &r)
		if r.Opened {
			t.Fatalf("a session opened from %s, which allowed_origins does not list", other)
		}
		t.Logf("the page sees: %s", r.Error)
		if !waitFor(scale(5*time.Second), func() bool {
			return strings.Contains(log.String(), "webtransport session refused") && strings.Contains(log.String(), "status=403")
		}) {
			t.Errorf("the server did not log a 403 for Origin %s:\n%s", other, log.String())
		}
		c.run(t, 30*time.Second, "back to the allowed origin", chromedp.Navigate(origin+"/wt.html"),
			chromedp.Evaluate[chromedp.Void](wtPageJS+fmt.Sprintf(";window.wtBase=%q;'ok'", base)))
	})

	t.Run("a 15-day certificate is refused by hash", func(t *testing.T) {
		certFile, keyFile, hash15, _ := shortCert(t, 15*24*time.Hour)
		ts15 := start(t, localhostTLS(t.TempDir(), certFile, keyFile)+fmt.Sprintf("[webtransport]\nenabled = true\nallowed_origins = [%q]\n", origin))
		var r struct {
			Opened bool
			Error  string
		}
		c.eval(t, 30*time.Second, "open with a 15-day certificate's hash", fmt.Sprintf(`(async () => {
  window.wtBase = %q;
  try { const s = await wt("mode=echo", %q); s.close(); return JSON.stringify({ opened: true }); }
  catch (e) { return JSON.stringify({ opened: false, error: e.name + ": " + e.message }); }
  finally { window.wtBase = %q; }
})()`, "https://localhost:"+portOf(ts15.addr)+"/.well-known/engine/diagnostics", hash15, base), &r)
		if r.Opened {
			t.Fatal("Chromium took a 15-day certificate by its hash: docs/BROWSERS.md's limit is wrong")
		}
		t.Logf("15-day certificate: %s", r.Error)
	})
}

// pageFetch is what fetchJS reports of a download from the page.
type pageFetch struct {
	Bytes   int64
	SHA256  string
	Seconds float64
	AltSvc  string
	Nav     string      // the page's own protocol (nextHopProtocol: h3, h2, http/1.1)
	Res     [][2]string // each resource's URL and protocol
}

// fetchJS downloads path in the page with fetch(), hashes it with Web
// Crypto (SHA-256: it has no BLAKE3), and reports it with the protocol
// of every request the page made, as the page saw them.
func fetchJS(path string) string {
	return fmt.Sprintf(`(async () => {
  const t0 = performance.now();
  const r = await fetch(%q, { cache: "no-store" });
  if (!r.ok) throw new Error("fetch: " + r.status);
  const buf = await r.arrayBuffer();
  const seconds = (performance.now() - t0) / 1000;
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", buf));
  return JSON.stringify({ bytes: buf.byteLength, sha256: Array.from(d, (b) => b.toString(16).padStart(2, "0")).join(""),
    seconds, altSvc: r.headers.get("alt-svc") || "",
    nav: performance.getEntriesByType("navigation")[0].nextHopProtocol,
    res: performance.getEntriesByType("resource").map((e) => [e.name, e.nextHopProtocol]) });
})()`, path)
}

// TestBrowserHTTP3: Chromium's requests go over HTTP/3 when it is told to
// use QUIC for the origin (--origin-to-force-quic-on; the certificate is
// trusted by --ignore-certificate-errors-spki-list), as the page's
// Resource Timing and the engine's access log both say; a 100 MiB
// download through fetch() arrives whole, hashed in the page. Without
// the force, Chromium sees Alt-Svc and, with a certificate no public
// root issued (trusted by the switch, or by a root in its own NSS
// store), stays on HTTP/2: it takes QUIC from Alt-Svc only for
// certificates that chain to a publicly trusted root. The test logs the
// protocols it used; docs/BROWSERS.md reports them.
func TestBrowserHTTP3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium: -short")
	}
	root := t.TempDir()
	_, sum := linkBig(t, root, "big.bin")
	writeFile(t, filepath.Join(root, "index.html"), "<!doctype html><title>HTTP/3 test page</title><p>HTTP/3 test page</p>\n")
	pki := newPKI(t, t.TempDir(), "localhost")
	alog := filepath.Join(t.TempDir(), "access.log")
	// A connection idle for a second is closed, so that a second load
	// of the page needs a new one: Chromium asks Alt-Svc only then.
	ts := start(t, fmt.Sprintf("access_log = %q\naccess_log_format = \"json\"\n", alog)+
		localhostTLS(root, pki.certFile, pki.keyFile)+"[limits]\nidle_timeout = \"1s\"\n")
	_, port, _ := strings.Cut(ts.addr, ":")
	origin := "https://localhost:" + port
	leaf := readCert(t, pki.certFile)
	pk := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	spki := base64.StdEncoding.EncodeToString(pk[:])

	t.Run("forced QUIC", func(t *testing.T) {
		c := newChrome(t, map[string]any{
			"origin-to-force-quic-on":             "localhost:" + port,
			"ignore-certificate-errors-spki-list": spki,
		})
		before := len(accessLines(t, alog, 0, 0))
		c.run(t, 30*time.Second, "open the page", chromedp.Navigate(origin+"/index.html"))
		var r pageFetch
		c.eval(t, 300*time.Second, "fetch 100 MiB", fetchJS("/big.bin"), &r)
		if r.Bytes != 100<<20 || r.SHA256 != sum {
			t.Fatalf("the page received %d bytes with SHA-256 %s, want %d with %s", r.Bytes, r.SHA256, 100<<20, sum)
		}
		t.Logf("100 MiB through fetch() over %v in %.2f s (%.0f MiB/s, hashed in the page); the page's protocol %s; resources %v",
			protoOf(r.Res, "/big.bin"), r.Seconds, 100/r.Seconds, r.Nav, r.Res)
		if r.Nav != "h3" || protoOf(r.Res, "/big.bin") != "h3" {
			t.Errorf("the page says it used %s (page) and %s (download), want h3", r.Nav, protoOf(r.Res, "/big.bin"))
		}
		lines := accessLines(t, alog, before+2, 10*time.Second)[before:]
		seen := map[string]string{}
		for _, l := range lines {
			seen[fmt.Sprint(l["path"])] = fmt.Sprintf("%v from %v", l["protocol"], l["client"])
			if l["protocol"] != "HTTP/3.0" {
				t.Errorf("access log: %v %v over %v, want HTTP/3.0", l["method"], l["path"], l["protocol"])
			}
		}
		if seen["/index.html"] == "" || seen["/big.bin"] == "" {
			t.Errorf("access log lacks the page's requests: %v", lines)
		}
		t.Logf("access log, protocol per request: %v", seen)
	})

	t.Run("Alt-Svc alone, certificate trusted by switch", func(t *testing.T) {
		netlog := filepath.Join(t.TempDir(), "netlog.json")
		c := newChrome(t, map[string]any{"ignore-certificate-errors-spki-list": spki, "log-net-log": netlog})
		altSvcRun(t, c, origin, netlog, port)
	})

	t.Run("Alt-Svc alone, root trusted in Chromium's NSS store", func(t *testing.T) {
		certutil := testtool.Require(t, "certutil")
		home := t.TempDir()
		db := "sql:" + filepath.Join(home, ".pki", "nssdb")
		os.MkdirAll(filepath.Join(home, ".pki", "nssdb"), 0o700)
		for _, args := range [][]string{
			{"-d", db, "-N", "--empty-password"},
			{"-d", db, "-A", "-t", "C,,", "-n", "engine test CA", "-i", pki.caFile},
		} {
			if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
				t.Fatalf("certutil %v: %v\n%s", args, err, out)
			}
		}
		netlog := filepath.Join(t.TempDir(), "netlog.json")
		c := newChromeEnv(t, map[string]any{"log-net-log": netlog}, "HOME="+home)
		altSvcRun(t, c, origin, netlog, port)
	})
}

// altSvcRun loads the page twice, fetching a file each time, with
// nothing forcing QUIC: the first response's Alt-Svc is all Chromium
// has to go on. It logs the protocols the page saw and what Chromium's
// net log (written to netlog) says of its QUIC attempts to port, and
// fails unless Chromium took the engine's Alt-Svc.
func altSvcRun(t *testing.T, c *chrome, origin, netlog, port string) {
	t.Helper()
	var protos []string
	for i := 0; i < 2; i++ {
		c.run(t, 30*time.Second, "open the page", chromedp.Navigate(origin+"/index.html"))
		if title := value(t, c, 10*time.Second, "read the title", chromedp.Title()); title != "HTTP/3 test page" {
			t.Fatalf("the page's title is %q: the certificate was not trusted", title)
		}
		var r pageFetch
		c.eval(t, 60*time.Second, "fetch", fetchJS("/index.html?again"), &r)
		if r.AltSvc == "" {
			t.Errorf("response %d over %s carried no Alt-Svc", i, protoOf(r.Res, "/index.html?again"))
		}
		protos = append(protos, r.Nav, protoOf(r.Res, "/index.html?again"))
		if i == 0 {
			t.Logf("Alt-Svc: %s", r.AltSvc)
		}
		// The engine closes the idle connection after 1 s: the next
		// load needs a new one, where Alt-Svc may take it to QUIC.
		time.Sleep(2500 * time.Millisecond)
	}
	t.Logf("protocols of the page and its fetch, loaded twice: %v", protos)
	chromedp.Cancel(c.ctx) // the net log is complete once the browser exits
	found, closes := netlogQUIC(t, netlog, port)
	if found == 0 {
		t.Errorf("Chromium's net log records no Alt-Svc for port %s: it did not take the engine's", port)
	}
	t.Logf("Chromium found the Alt-Svc %d times; its QUIC connections to port %s ended: %q", found, port, closes)
}

// netlogQUIC reads a Chromium net log (--log-net-log): how many times a
// request found an alternative service on port, and how each QUIC
// session to that port was closed.
func netlogQUIC(t *testing.T, path, port string) (found int, closes []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("net log: %v", err)
	}
	var nl struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int `json:"type"`
			Params struct {
				AltSvc  string `json:"alt_svc"`
				Details string `json:"details"`
			} `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &nl); err != nil {
		t.Fatalf("net log %s: %v", path, err)
	}
	types := nl.Constants.LogEventTypes
	for _, e := range nl.Events {
		switch e.Type {
		case types["HTTP_STREAM_JOB_CONTROLLER_ALT_SVC_FOUND"]:
			if strings.Contains(e.Params.AltSvc, ":"+port+",") {
				found++
			}
		case types["QUIC_SESSION_CLOSED"]:
			if e.Params.Details != "" && !slices.Contains(closes, e.Params.Details) {
				closes = append(closes, e.Params.Details)
			}
		}
	}
	return found, closes
}

// protoOf is the protocol the page's Resource Timing gives the resource
// whose URL ends in suffix.
func protoOf(res [][2]string, suffix string) string {
	for _, r := range res {
		if strings.HasSuffix(r[0], suffix) {
			return r[1]
		}
	}
	return ""
}

// artifact writes b to name in the directory of files a person looks at
// after a run ($ENGINE_TEST_ARTIFACTS; scripts/test.sh sets it and names
// what it holds at the end), and logs where.
func artifact(t *testing.T, name string, b []byte) {
	t.Helper()
	dir := os.Getenv("ENGINE_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "engine-test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s (%d bytes)", name, p, len(b))
}

// TestBrowserDirectoryListing: Chromium renders a listing of names an
// uploader could choose (markup, a script in an attribute, schemes,
// quotes, a fragment and a query in a name, non-ASCII): every name shows
// as its own text, nothing in one runs or becomes an element, and every
// link opens the very file it names. The screenshot is written for a
// person to look at (artifact).
func TestBrowserDirectoryListing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium: -short")
	}
	root := t.TempDir()
	names := []string{
		"plain.txt",
		`<img src=x onerror="window.pwned=1">.txt`,
		"<b>bold",
		"<script>window.pwned=2<script>",
		"javascript:window.pwned=3",
		"https:evil.example",
		`a&b "q" 'x'.txt`,
		"#frag?q=1.txt",
		"naïve résumé.txt",
		"100%.txt",
	}
	for _, n := range names {
		writeFile(t, filepath.Join(root, n), "file "+n)
	}
	// No request can name a file with a backslash (the engine refuses
	// the path): it is not listed.
	const unlisted = `back\slash.txt`
	writeFile(t, filepath.Join(root, unlisted), "file "+unlisted)
	os.Mkdir(filepath.Join(root, "sub <dir>"), 0o755)
	writeFile(t, filepath.Join(root, "sub <dir>", "inner.txt"), "file inner.txt")
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\ndirectory_listing = true\n", root))

	c := newChrome(t, nil)
	c.run(t, 30*time.Second, "open the listing", chromedp.Navigate("http://"+ts.addr+"/"))
	var r struct {
		Links  [][2]string // text, href
		Pwned  any
		Extra  []string // elements a name must not have made
		Bodies map[string]string
	}
	c.eval(t, 60*time.Second, "read the listing and follow its links", `(async () => {
  const links = Array.from(document.querySelectorAll("a"), (a) => [a.textContent, a.href]);
  const extra = Array.from(document.querySelectorAll("img, b, script, iframe, object, embed"), (e) => e.outerHTML);
  const bodies = {};
  for (const [text, href] of links) {
    if (text === "../") continue;
    const r = await fetch(href);
    bodies[text] = r.status + " " + (text.endsWith("/") ? (await r.text()).includes("inner.txt") ? "lists inner.txt" : "no inner.txt" : await r.text());
  }
  return JSON.stringify({ links, pwned: window.pwned === undefined ? null : window.pwned, extra, bodies });
})()`, &r)
	png := value(t, c, 30*time.Second, "take a screenshot", chromedp.FullScreenshot(100))
	artifact(t, "directory-listing.png", png)

	if r.Pwned != nil {
		t.Errorf("a name ran as script: window.pwned = %v", r.Pwned)
	}
	if len(r.Extra) > 0 {
		t.Errorf("names became elements: %q", r.Extra)
	}
	shown := map[string]bool{}
	for _, l := range r.Links {
		shown[l[0]] = true
		if !strings.HasPrefix(l[1], "http://"+ts.addr+"/") {
			t.Errorf("link %q goes to %q, off this origin", l[0], l[1])
		}
	}
	for _, n := range names {
		if !shown[n] {
			t.Errorf("name %q is not shown as its own text; links: %q", n, r.Links)
		}
		if got, want := r.Bodies[n], "200 file "+n; got != want {
			t.Errorf("the link of %q opens %q, want %q", n, got, want)
		}
	}
	if shown[unlisted] {
		t.Errorf("%q is listed, but no request can name it", unlisted)
	}
	if got := r.Bodies["sub <dir>/"]; got != "200 lists inner.txt" {
		t.Errorf("the link of the directory \"sub <dir>/\" opens %q, want its listing", got)
	}
}

// diagResults is what the diagnostics page reports (window.engineDiagnostics).
type diagResults struct {
	State   string
	Errors  []string
	Results struct {
		Echo *struct {
			Streams       int
			Bytes         int64
			MiBPerS       float64 `json:"mib_per_s"`
			DatagramsSent int     `json:"datagrams_sent"`
			DatagramsBack int     `json:"datagrams_back"`
			DatagramsBad  int     `json:"datagrams_bad"`
			Closed        struct{ Code int }
		}
		Source *struct {
			Bytes    int64
			Verified bool
			MiBPerS  float64 `json:"mib_per_s"`
			Closed   struct{ Code int }
		}
		Datagrams *struct {
			Sent, Size, Received, Lost, Duplicates, Corrupt int
			Loss                                            float64
			Closed                                          struct{ Code int }
		}
	}
}

// runDiag opens the diagnostics page at base with query and waits for
// the page to say it is done.
func runDiag(t *testing.T, c *chrome, base, query string, d time.Duration) diagResults {
	t.Helper()
	c.run(t, 30*time.Second, "open the diagnostics page", chromedp.Navigate(base+"?"+query))
	var r diagResults
	c.eval(t, d, "wait for the page to finish", `new Promise((ok) => {
  const f = () => window.engineDiagnostics && window.engineDiagnostics.state === "done" ?
    ok(JSON.stringify(window.engineDiagnostics)) : setTimeout(f, 100);
  f();
})`, &r)
	return r
}

// TestBrowserDiagnosticsPage: the page the engine serves at the
// endpoint's path runs echo, source and datagrams from Chromium against
// the endpoint (the page's own origin, which allowed_origins need not
// list), checks every byte, and reports throughput, datagram loss and
// each session's close. At the endpoint's limits it runs (a session of
// exactly max_bytes_per_session); a byte past them it refuses before
// opening anything, naming the limit. Its Content-Security-Policy lets
// its own script and style run.
func TestBrowserDiagnosticsPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium: -short")
	}
	certFile, keyFile, _, spki := shortCert(t, 10*24*time.Hour)
	ts := start(t, localhostTLS(t.TempDir(), certFile, keyFile)+`[webtransport]
enabled = true
max_bytes_per_session = "64MiB"
max_streams_per_session = 4
max_datagram_bytes = 1000
idle_timeout = "5s"
`)
	base := "https://" + ts.addr + "/.well-known/engine/diagnostics"
	c := newChrome(t, map[string]any{"ignore-certificate-errors-spki-list": spki})

	r := runDiag(t, c, base, "run=1&echo_bytes=1048576&source_bytes=16777216&datagram_rate=1000&datagram_count=500", 180*time.Second)
	if len(r.Errors) > 0 {
		t.Fatalf("the page reports failures: %q", r.Errors)
	}
	e, s, d := r.Results.Echo, r.Results.Source, r.Results.Datagrams
	if e == nil || s == nil || d == nil {
		t.Fatalf("the page ran %+v, want echo, source and datagrams", r.Results)
	}
	if e.Streams != 4 || e.Bytes != 4<<20 || e.DatagramsSent != 100 || e.DatagramsBack == 0 || e.DatagramsBad != 0 || e.Closed.Code != 0 {
		t.Errorf("echo: %+v, want 4 streams of 1 MiB back, datagrams back, code 0", *e)
	}
	if s.Bytes != 16<<20 || !s.Verified || s.Closed.Code != 0 {
		t.Errorf("source: %+v, want 16 MiB verified, code 0", *s)
	}
	if d.Sent != 500 || d.Size != 1000 || d.Received == 0 || d.Corrupt != 0 || d.Duplicates != 0 || d.Received+d.Lost != d.Sent {
		t.Errorf("datagrams: %+v, want 500 of 1000 bytes sent, counted whole", *d)
	}
	t.Logf("the page measured: echo %.1f MiB/s (%d of %d datagrams back), source %.1f MiB/s, datagrams %d of %d (%.2f %% lost)",
		e.MiBPerS, e.DatagramsBack, e.DatagramsSent, s.MiBPerS, d.Received, d.Sent, 100*d.Loss)
	png := value(t, c, 30*time.Second, "take a screenshot", chromedp.FullScreenshot(100))
	artifact(t, "diagnostics-page.png", png)

	// Exactly the limit: the endpoint takes it, so the page must.
	r = runDiag(t, c, base, "run=1&echo_streams=0&echo_datagrams=0&datagram_count=0&source_bytes=67108864", 180*time.Second)
	if len(r.Errors) > 0 || r.Results.Source == nil || r.Results.Source.Bytes != 64<<20 || !r.Results.Source.Verified {
		t.Errorf("source of exactly max_bytes_per_session: errors %q, results %+v", r.Errors, r.Results.Source)
	}
	// A byte, or a stream, past a limit: refused by the page, naming it.
	for _, q := range []string{
		"run=1&echo_streams=0&echo_datagrams=0&datagram_count=0&source_bytes=67108865",
		"run=1&echo_streams=5&source_bytes=0&datagram_count=0",
		"run=1&echo_streams=0&echo_datagrams=0&source_bytes=0&datagram_count=67109",
	} {
		r = runDiag(t, c, base, q, 30*time.Second)
		if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "max_") {
			t.Errorf("?%s: the page reports %q, want one error naming the limit", q, r.Errors)
		}
	}
	// Led there by another site (here the page on 127.0.0.1, another
	// site than localhost), ?run=1 runs nothing: the page waits for its
	// button (Sec-Fetch-Site: cross-site).
	c.run(t, 30*time.Second, "open the page on another site", chromedp.Navigate("https://127.0.0.1:"+portOf(ts.addr)+"/.well-known/engine/diagnostics"))
	led := base + "?run=1&source_bytes=1048576"
	c.run(t, 10*time.Second, "follow a link from it", chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.href = %q", led)))
	var state []string
	if !waitFor(scale(30*time.Second), func() bool {
		v, err := chromedp.Run(c.ctx, chromedp.Evaluate[[]string](`location.href === `+fmt.Sprintf("%q", led)+` && document.readyState === "complete" && window.engineDiagnostics ?
  [window.engineDiagnostics.state, document.getElementById("status").textContent] : []`))
		state = v
		return err == nil && len(v) == 2
	}) {
		t.Fatal("the link from another site did not load the page")
	}
	time.Sleep(scale(500 * time.Millisecond)) // had it started, it would be running by now
	state = value(t, c, 10*time.Second, "read the page's state", chromedp.Evaluate[[]string](`[window.engineDiagnostics.state, document.getElementById("status").textContent]`))
	if state[0] != "idle" || !strings.Contains(state[1], "another site") {
		t.Errorf("led from another site with ?run=1, the page is %q (%q), want idle and saying why", state[0], state[1])
	}

	// The page's own pattern check (words at a time) against the test
	// page's (BigInt, byte by byte), from odd offsets, and a byte out of
	// place found where it is.
	var pc struct {
		Same   bool
		Found  []int
		Filled int
	}
	c.eval(t, 30*time.Second, "the page's pattern check", wtPageJS+`;(async () => {
  const P = window.engineDiagnostics.Pattern;
  let same = true;
  const found = [];
  for (const [from, n] of [[0, 4096], [3, 1001], [8 * 1000003 + 5, 777], [2 ** 33 + 1, 64]]) {
    const b = new Uint8Array(n);
    new P(from).run(b, true);
    same = same && window.same(b, window.pattern(from, n));
    const chunked = new P(from);
    let ok = chunked.run(b.subarray(0, 5), false) === -1 && chunked.run(b.subarray(5), false) === -1;
    b[n - 7] ^= 1;
    found.push(ok ? new P(from).run(b, false) : -2);
  }
  return JSON.stringify({ same, found });
})()`, &pc)
	if !pc.Same || !slices.Equal(pc.Found, []int{4096 - 7, 1001 - 7, 777 - 7, 64 - 7}) {
		t.Errorf("the page's pattern: same as the reference %v; a flipped byte found at %v, want %v", pc.Same, pc.Found, []int{4089, 994, 770, 57})
	}
	// Its script ran (the page reported); its style applied too only if
	// the policy names the style's hash.
	if w := value(t, c, 10*time.Second, "read the page's style", chromedp.Evaluate[string](`getComputedStyle(document.body).maxWidth`)); w == "none" {
		t.Errorf("the page's own style did not apply (max-width %q): its Content-Security-Policy refuses it", w)
	}
}
