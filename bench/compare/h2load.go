package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// h2loadArgs is h2load's command line for a row: the row's clients, one
// stream each, exactly n requests in all.
func h2loadArgs(r row, url string, n int) []string {
	return []string{"-c", strconv.Itoa(r.connections), "-m", strconv.Itoa(max(1, r.streams)), "-t", strconv.Itoa(clientThreads(r.connections)),
		"-n", strconv.Itoa(n), "--tls13-ciphers", "TLS_AES_128_GCM_SHA256", url}
}

// h2loadResult is what h2load printed about a run.
type h2loadResult struct {
	tlsProtocol, appProtocol                   string
	seconds                                    float64 // "finished in"
	total, started, done, succeeded            int64   // requests
	failed, errored, timeout                   int64
	status2xx, status3xx, status4xx, status5xx int64
	dataBytes                                  int64
}

var (
	h2loadFinished = regexp.MustCompile(`^finished in ([0-9.]+)(us|ms|s),`)
	h2loadRequests = regexp.MustCompile(`^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2loadStatus   = regexp.MustCompile(`^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2loadTraffic  = regexp.MustCompile(`^traffic: .*, [^,]* \((\d+)\) data$`)
)

// parseH2load reads h2load's summary. Every line the checks need must
// be there.
func parseH2load(out string) (h2loadResult, error) {
	var h h2loadResult
	ints := func(m []string, into ...*int64) {
		for i, p := range into {
			*p, _ = strconv.ParseInt(m[i+1], 10, 64)
		}
	}
	found := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "TLS Protocol: "); ok {
			h.tlsProtocol = v
		}
		if v, ok := strings.CutPrefix(line, "Application protocol: "); ok {
			h.appProtocol = v
		}
		if m := h2loadFinished.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				return h, fmt.Errorf("h2load: %q: %v", line, err)
			}
			h.seconds = v * map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1}[m[2]]
			found["finished"] = true
		}
		if m := h2loadRequests.FindStringSubmatch(line); m != nil {
			ints(m, &h.total, &h.started, &h.done, &h.succeeded, &h.failed, &h.errored, &h.timeout)
			found["requests"] = true
		}
		if m := h2loadStatus.FindStringSubmatch(line); m != nil {
			ints(m, &h.status2xx, &h.status3xx, &h.status4xx, &h.status5xx)
			found["status codes"] = true
		}
		if m := h2loadTraffic.FindStringSubmatch(line); m != nil {
			ints(m, &h.dataBytes)
			found["traffic"] = true
		}
	}
	for _, k := range []string{"finished", "requests", "status codes", "traffic"} {
		if !found[k] {
			return h, fmt.Errorf("h2load printed no %q line", k)
		}
	}
	return h, nil
}

// checkH2load decides whether an h2load run counts. h2load keeps no
// body, so this is status and length only, but exact: with -n every
// request is accounted for.
func checkH2load(h h2loadResult, n int, size int64) (reason, detail string) {
	switch {
	case h.appProtocol != "h2":
		return "protocol", fmt.Sprintf("application protocol %q, want h2", h.appProtocol)
	case h.tlsProtocol != "TLSv1.3":
		return "protocol", fmt.Sprintf("TLS protocol %q, want TLSv1.3", h.tlsProtocol)
	case h.failed+h.errored+h.timeout > 0:
		return "failed requests", fmt.Sprintf("%d failed, %d errored, %d timed out", h.failed, h.errored, h.timeout)
	case h.total != int64(n) || h.done != int64(n) || h.succeeded != int64(n):
		return "failed requests", fmt.Sprintf("%d total, %d done, %d succeeded of %d", h.total, h.done, h.succeeded, n)
	case h.status2xx != int64(n):
		return "status", fmt.Sprintf("%d 2xx, %d 3xx, %d 4xx, %d 5xx of %d", h.status2xx, h.status3xx, h.status4xx, h.status5xx, n)
	case h.dataBytes != int64(n)*size:
		return "length", fmt.Sprintf("%d DATA bytes, want %d × %d", h.dataBytes, n, size)
	case h.seconds <= 0:
		return "timing", fmt.Sprintf("finished in %v s", h.seconds)
	}
	return "", ""
}

func (x *extRun) h2load(ctx context.Context) extSample {
	ctx, cancel := context.WithTimeout(ctx, 10*x.env.sample+120*time.Second)
	defer cancel()
	n := x.requests
	cmd := exec.CommandContext(ctx, "h2load", h2loadArgs(x.row, x.url.String(), n)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return rejected("h2load failed", "%v: %s", err, oneLine(out.String()))
	}
	h, err := parseH2load(out.String())
	if err != nil {
		return rejected("h2load failed", "%v", err)
	}
	if reason, detail := checkH2load(h, n, x.size); reason != "" {
		return rejected(reason, "%s", detail)
	}
	return extSample{value: float64(h.dataBytes) / (1 << 20) / h.seconds, bytes: h.dataBytes, requests: int64(n)}
}
