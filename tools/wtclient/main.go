// Command wtclient is an independent WebTransport test client for the
// engine's diagnostics endpoint (docs/WEBTRANSPORT.md). It is built on
// github.com/quic-go/webtransport-go's client, not on the engine's code,
// so that the engine's tests check the server against someone else's
// reading of the protocol. It dials over one QUIC connection, runs one
// operation per session, and prints one JSON object on stdout.
//
// Usage:
//
//	wtclient -url URL [-ca FILE | -insecure] [-sni NAME] [-origin VALUE]
//	         [-timeout DUR] [-op echo|source|sink|datagrams|hold|close|flood|bigdatagram]
//	         [-streams K] [-bytes N] [-datagrams D] [-dgsize S] [-grace DUR]
//	         [-sessions M] [-code C] [-msg S]
//
// The exit status is 2 for bad flags and 0 otherwise: every failure of
// the run is in the JSON, as "ok": false and "error".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"
)

// config is what the flags say.
type config struct {
	rawURL   string
	url      *url.URL
	ca       string
	insecure bool
	sni      string
	origin   string
	timeout  time.Duration

	op        string
	streams   int
	bytes     int64
	datagrams int
	dgsize    int
	grace     time.Duration
	sessions  int
	code      uint32
	msg       string
}

var ops = []string{"echo", "source", "sink", "datagrams", "hold", "close", "flood", "bigdatagram"}

// errUsage is a bad command line; parseFlags has already said why.
var errUsage = errors.New("usage")

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("wtclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var code uint64
	fs.StringVar(&c.rawURL, "url", "", "the session's URL, with its query (required)")
	fs.StringVar(&c.ca, "ca", "", "PEM file of the root certificate(s) to trust")
	fs.BoolVar(&c.insecure, "insecure", false, "do not verify the server's certificate")
	fs.StringVar(&c.sni, "sni", "", "TLS server name (default: the URL's host)")
	fs.StringVar(&c.origin, "origin", "", "the Origin header, sent when not empty")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "the whole run's time limit")
	fs.StringVar(&c.op, "op", "echo", "the operation: "+strings.Join(ops, ", "))
	fs.IntVar(&c.streams, "streams", 1, "bidirectional streams to open (echo, sink, hold)")
	fs.Int64Var(&c.bytes, "bytes", 1<<20, "pattern bytes to send on each stream (echo, sink)")
	fs.IntVar(&c.datagrams, "datagrams", 0, "datagrams to send (echo)")
	fs.IntVar(&c.dgsize, "dgsize", 1000, "a datagram's size in bytes, at least 8 (echo, bigdatagram)")
	fs.DurationVar(&c.grace, "grace", 500*time.Millisecond, "how long to wait for datagrams after the server's line (datagrams)")
	fs.IntVar(&c.sessions, "sessions", 1, "sessions to dial at once on the one QUIC connection")
	fs.Uint64Var(&code, "code", 0, "the session error code to close with (close)")
	fs.StringVar(&c.msg, "msg", "", "the message to close with (close)")
	if err := fs.Parse(args); err != nil {
		return nil, errUsage
	}
	bad := func(format string, a ...any) (*config, error) {
		fmt.Fprintf(stderr, "wtclient: "+format+"\n", a...)
		fs.Usage()
		return nil, errUsage
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected arguments %q", fs.Args())
	case c.rawURL == "":
		return bad("-url is required")
	case c.ca != "" && c.insecure:
		return bad("-ca and -insecure exclude each other")
	case c.timeout <= 0:
		return bad("-timeout must be positive")
	case c.streams < 0, c.bytes < 0, c.datagrams < 0, c.grace < 0:
		return bad("-streams, -bytes, -datagrams and -grace must not be negative")
	case c.dgsize < 8 || c.dgsize > 65535:
		return bad("-dgsize must be 8..65535 (a datagram starts with its 8-byte sequence number)")
	case c.sessions < 1:
		return bad("-sessions must be at least 1")
	case code > 0xffffffff:
		return bad("-code must fit in 32 bits")
	}
	found := false
	for _, op := range ops {
		found = found || op == c.op
	}
	if !found {
		return bad("unknown -op %q (want one of %s)", c.op, strings.Join(ops, ", "))
	}
	u, err := url.Parse(c.rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return bad("-url %q is not an https:// URL", c.rawURL)
	}
	c.url = u
	c.code = uint32(code)
	return c, nil
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs the command and returns its exit status.
func cli(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	// run honours the timeout; the watchdog is for a library call that
	// does not, so that the caller still gets its one JSON object.
	done := make(chan any, 1)
	start := time.Now()
	go func() { done <- run(context.Background(), c) }()
	var out any
	select {
	case out = <-done:
	case <-time.After(c.timeout + 10*time.Second):
		r := newSessionResult()
		r.Error = fmt.Sprintf("wtclient hung: no result %v after the -timeout of %v", 10*time.Second, c.timeout)
		r.ElapsedS = time.Since(start).Seconds()
		if c.sessions > 1 {
			out = &MultiResult{Error: r.Error, ElapsedS: r.ElapsedS, Sessions: []*SessionResult{}}
		} else {
			out = r
		}
	}
	b, err := json.Marshal(out)
	if err != nil { // cannot happen with these types
		fmt.Fprintf(stderr, "wtclient: %v\n", err)
		b = []byte(`{"ok":false,"error":"encoding the result failed"}`)
	}
	stdout.Write(append(b, '\n'))
	return 0
}
