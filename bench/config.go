package bench

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/mediaship/engine/integrity"
)

// Config describes one run. The zero value of each field means its
// default.
type Config struct {
	URLs []string // requested round-robin
	// Protocol is "h1" (the zero value), "h2", "h3" or "webtransport":
	// each request is then a WebTransport session on the engine's
	// diagnostics endpoint, the URL's query its mode (source or
	// datagrams; webtransport.go).
	Protocol string
	// Connections is how many connections to open. Zero means 1.
	Connections int
	// Streams is the concurrent requests per connection for h2 and h3,
	// the concurrent sessions for webtransport. Zero means 1. HTTP/1.1
	// always has one.
	Streams int
	// Duration of the measured run (after Warmup). Zero means 10s unless
	// Requests is set.
	Duration time.Duration
	// Requests ends the run after this many responses instead.
	Requests int
	// Samples splits the run into this many samples. Zero means 5.
	Samples int
	// Warmup runs before measuring; its responses are checked too.
	Warmup time.Duration
	// Rate, when positive, issues requests on a fixed schedule
	// (requests/s, open loop): latency counts from each request's
	// scheduled time, so a slow server cannot hide queueing (coordinated
	// omission). Every request due before the end of the measured time
	// is sent, even when a connection frees up only after the end; one
	// still unsent Timeout after it was due fails (behind-schedule).
	Rate float64
	// Range requests bytes First-Last of each URL when Last >= 0.
	RangeFirst, RangeLast int64
	// The expected bodies: a manifest (with LocalRoot, the directory the
	// manifest's files are in, needed for ranges), or one digest and size
	// for every URL. Without either, Run refuses unless LengthOnly is set:
	// then only status and length are checked, and the report says so.
	Manifest     []integrity.Entry
	LocalRoot    string
	ExpectDigest *integrity.Digest
	ExpectSize   int64 // -1: unknown
	LengthOnly   bool
	// NewConnectionPerRequest closes every connection after one response
	// (a full TLS handshake each time).
	NewConnectionPerRequest bool
	Insecure                bool // accept any TLS certificate
	// KeyExchanges are the TLS key exchanges the client offers (crypto/tls
	// CurvePreferences). Zero means crypto/tls's default, X25519MLKEM768
	// first.
	KeyExchanges []tls.CurveID
	// ServerPID, when set, is measured: CPU seconds and peak RSS (with
	// its child processes).
	ServerPID int
	// OnSamples, when set, is called when the samples start (after the
	// warmup, where ServerPID's CPU is first read), and the function it
	// returns when they end (where that CPU is read again): a caller's
	// own readings of the server over the same time (bench/compare reads
	// the server's syscalls and wake-ups). Neither is called when the
	// run ends during the warmup.
	OnSamples func() (end func())
	// AdminURL, when set, is an engine's admin listener
	// ("http://127.0.0.1:9100"): its /metrics is read at the start and
	// the end of the samples, and the report gives the differences
	// (socket errors by kind, bytes by transport, handshakes).
	AdminURL string
	// Timeout bounds one request, from its start to the last byte of its
	// body; it also bounds how long the run waits for the requests in
	// flight at the end. Zero means 60s.
	Timeout time.Duration
	// Progress, when set, is called about once a second.
	Progress func(ProgressInfo)
}

// ProgressInfo is what the live progress line shows.
type ProgressInfo struct {
	Elapsed   time.Duration
	Bytes     int64
	Responses int64
	Errors    int64
	Warmup    bool
	Draining  bool // the measured time is over: waiting for responses in flight
}

func (c *Config) withDefaults() error {
	if len(c.URLs) == 0 {
		return errors.New("bench: no URL")
	}
	switch c.Protocol {
	case "":
		c.Protocol = "h1"
	case "h1", "h2", "h3", "webtransport":
	default:
		return fmt.Errorf("bench: protocol %q: expected h1, h2, h3 or webtransport", c.Protocol)
	}
	if c.Connections <= 0 {
		c.Connections = 1
	}
	if c.Streams <= 0 || c.Protocol == "h1" {
		c.Streams = 1
	}
	if c.Samples <= 0 {
		c.Samples = 5
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Requests > 0 && c.Requests < c.Samples {
		c.Samples = c.Requests
	}
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	if c.RangeLast >= 0 && c.RangeFirst > c.RangeLast {
		return errors.New("bench: range first byte after last")
	}
	return nil
}
