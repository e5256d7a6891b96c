package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mediaship/engine/bench"
)

// sTimeArgs is openssl s_time's command line: one connection at a time
// for a whole number of seconds, each a TLS 1.3 handshake (resuming
// the previous connection's session with resume, never with it off)
// and an HTTP/1.0 GET read to the server's close.
func sTimeArgs(host, path string, resume bool, d time.Duration) []string {
	mode := "-new"
	if resume {
		mode = "-reuse"
	}
	return []string{"s_time", "-connect", host, "-www", path, "-time", strconv.Itoa(wholeSeconds(d)), mode,
		"-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"}
}

// sTimeResult is what one s_time process printed.
type sTimeResult struct {
	conns     int64 // "N connections in ..."
	bytesRead int64 // "bytes read B": over all its timed connections
	// The marks it printed, one per timed connection: 'r' where the
	// session was resumed, another character ('*' for TLS 1.3) where
	// it was a full handshake.
	marks, resumed int64
}

var sTimeSummary = regexp.MustCompile(`^(\d+) connections in [0-9.]+s; [0-9.]+ connections/user sec, bytes read (\d+)$`)

// parseSTime reads s_time's output: its marks (a line of them per
// phase) and its summary.
func parseSTime(out string) (sTimeResult, error) {
	var s sTimeResult
	found := false
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if m := sTimeSummary.FindStringSubmatch(line); m != nil {
			if found {
				return s, fmt.Errorf("s_time printed two summaries (both -new and -reuse ran?)")
			}
			s.conns, _ = strconv.ParseInt(m[1], 10, 64)
			s.bytesRead, _ = strconv.ParseInt(m[2], 10, 64)
			found = true
			continue
		}
		if line != "" && strings.Trim(line, "r*") == "" {
			s.marks += int64(len(line))
			s.resumed += int64(strings.Count(line, "r"))
		}
	}
	if !found {
		return s, fmt.Errorf("s_time printed no summary")
	}
	return s, nil
}

// checkSTime decides whether a batch of s_time processes counts. s_time
// cannot see a status: each process's bytes must be its connections
// times the length of the probe's 200 response to the same request. And
// every connection must have resumed (resume) or none (not resume), as
// s_time marked them.
func checkSTime(results []sTimeResult, respLen int64, resume bool) (reason, detail string) {
	for i, s := range results {
		switch {
		case s.conns == 0:
			return "no connection", fmt.Sprintf("process %d completed no connection", i+1)
		case s.marks != s.conns:
			return "resumption unknown", fmt.Sprintf("process %d: %d marks for %d connections", i+1, s.marks, s.conns)
		case s.bytesRead != s.conns*respLen:
			return "length", fmt.Sprintf("process %d read %d bytes over %d connections, want %d each", i+1, s.bytesRead, s.conns, respLen)
		case resume && s.resumed != s.conns:
			return "not resumed", fmt.Sprintf("process %d: %d of %d connections resumed", i+1, s.resumed, s.conns)
		case !resume && s.resumed != 0:
			return "resumed", fmt.Sprintf("process %d: %d of %d connections resumed, want none", i+1, s.resumed, s.conns)
		}
	}
	return "", ""
}

// sTime runs procs s_time processes at once for d. s_time's loop ends
// on a whole second of the wall clock (it runs until time(NULL) passes
// its start plus -time), so they are started just after one, to end
// together.
func (x *extRun) sTime(ctx context.Context, procs int, d time.Duration) extSample {
	ctx, cancel := context.WithTimeout(ctx, d+60*time.Second)
	defer cancel()
	now := time.Now()
	select {
	case <-ctx.Done():
		return rejected("interrupted", "%v", ctx.Err())
	case <-time.After(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now)):
	}
	args := sTimeArgs(x.url.Host, x.url.RequestURI(), x.row.resume, d)
	outs := make([]bytes.Buffer, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range procs {
		cmd := exec.CommandContext(ctx, "openssl", args...)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			errs[i] = err
			continue
		}
		wg.Go(func() { errs[i] = cmd.Wait() })
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	results := make([]sTimeResult, procs)
	for i := range procs {
		if errs[i] != nil {
			return rejected("s_time failed", "process %d: %v: %s", i+1, errs[i], oneLine(lastBytes(outs[i].String(), 400)))
		}
		r, err := parseSTime(outs[i].String())
		if err != nil {
			return rejected("s_time failed", "process %d: %v", i+1, err)
		}
		results[i] = r
	}
	if reason, detail := checkSTime(results, x.respLen, x.row.resume); reason != "" {
		return rejected(reason, "%s", detail)
	}
	var conns, resumed int64
	for _, r := range results {
		conns += r.conns
		resumed += r.resumed
	}
	// The server also did -reuse's first connection in each process, a
	// full handshake before the timed loop: it is in the server's CPU,
	// so it is counted among the requests that CPU is divided by.
	served := conns
	if x.row.resume {
		served += int64(procs)
	}
	return extSample{value: float64(conns) / wall, requests: served, conns: conns, resumed: resumed}
}

// sClientArgs is the openssl s_client probe beside an s_time row: its
// OpenSSL, its TLS settings and, like s_time, no server name.
func sClientArgs(host string) []string {
	return []string{"s_client", "-connect", host, "-noservername", "-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"}
}

// probeKeyExchange makes one handshake as s_time does and returns the key
// exchange it negotiated, named as bench names them ("X25519", "P-256";
// OpenSSL's own name for one bench does not know).
func probeKeyExchange(ctx context.Context, host string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "openssl", sClientArgs(host)...)
	cmd.Stdin = strings.NewReader("") // s_client ends at end of input
	out, err := cmd.CombinedOutput()
	if g := parseSClientGroup(string(out)); g != "" {
		return g, nil
	}
	if err != nil {
		return "", fmt.Errorf("openssl s_client: %v: %s", err, oneLine(lastBytes(string(out), 300)))
	}
	return "", fmt.Errorf("openssl s_client named no key exchange: %s", oneLine(lastBytes(string(out), 300)))
}

// parseSClientGroup reads the key exchange from s_client's output:
// "Negotiated TLS1.3 group: X25519MLKEM768" (later OpenSSL releases) or
// "Server Temp Key: X25519, 253 bits" / "Server Temp Key: ECDH,
// prime256v1, 256 bits" (3.0; "Peer Temp Key" later); "" when it says
// none of them.
func parseSClientGroup(out string) string {
	var temp string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if g, ok := strings.CutPrefix(line, "Negotiated TLS1.3 group:"); ok {
			return keyExchangeNamed(g)
		}
		k, ok := strings.CutPrefix(line, "Server Temp Key:")
		if !ok {
			k, ok = strings.CutPrefix(line, "Peer Temp Key:")
		}
		if ok && temp == "" {
			f := strings.Split(k, ",")
			g := strings.TrimSpace(f[0])
			if (g == "ECDH" || g == "DH") && len(f) > 1 {
				g = strings.TrimSpace(f[1])
			}
			temp = keyExchangeNamed(g)
		}
	}
	return temp
}

// keyExchangeNamed is bench's name for what OpenSSL calls a group, or
// OpenSSL's name where bench has none.
func keyExchangeNamed(g string) string {
	g = strings.TrimSpace(g)
	if name, _, ok := bench.LookupKeyExchange(g); ok {
		return name
	}
	return g
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
