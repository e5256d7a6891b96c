package engine_test

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestProxyPausedResponseIdles: while a proxied response waits for its
// upstream's next bytes, the proxy waits too. An HTTP/1.1 client's
// exchange woke its client at the end of every turn, even one that moved
// nothing, and the client's turn pumped the exchange again: the loop spun,
// a whole CPU for as long as the upstream paused (a slow backend, a
// long poll, an event stream). The process's CPU time over a pause of a
// second tells: a spinning loop takes most of it, even on a busy machine.
func TestProxyPausedResponseIdles(t *testing.T) {
	const pause = time.Second
	resume := make(chan struct{})
	up := rawBackend(t, func(c net.Conn) {
		readHead(c)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nhalf")
		select {
		case <-resume:
		case <-time.After(scale(20 * time.Second)):
			return
		}
		io.WriteString(c, "done")
		io.Copy(io.Discard, c) // closed once the proxy has closed it
	})
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "", up))
	c := dial(t, ts.addr)
	c.send("GET /paused HTTP/1.1\r\nHost: a\r\n\r\n")
	resp := c.head("GET")
	first := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "half" {
		t.Fatalf("the response's first half: %q, %v", first, err)
	}
	// The response is under way, and paused upstream.
	before := cpuTime(t)
	time.Sleep(pause)
	used := cpuTime(t) - before
	close(resume)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "done" {
		t.Fatalf("the response's second half: %q, %v", rest, err)
	}
	if used > pause/2 { // spinning takes nearly all of it (0.84-1.0 s seen, loaded or not); an idle wait, next to none
		t.Errorf("the process used %v of CPU while a proxied response waited %v for its upstream; want next to none", used, pause)
	}
}

// cpuTime is the CPU time the process has used (user and system).
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
