package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mediaship/engine/fetch"
	"github.com/mediaship/engine/integrity"
	"golang.org/x/sys/unix"
)

// wireCounter relays TCP connections to target and counts the bytes each
// delivered to its client: acknowledged by the client's kernel (TCP_INFO
// bytes_acked when the connection ends), whether or not the client read
// them before it died. What a download cost on the wire.
type wireCounter struct {
	addr   string
	acked  atomic.Int64
	active sync.WaitGroup
}

// total waits for every relayed connection to end and returns the bytes
// their clients acknowledged.
func (w *wireCounter) total(t *testing.T) int64 {
	done := make(chan struct{})
	go func() { w.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("relayed connections still open after 10s")
	}
	return w.acked.Load()
}

func countWire(t *testing.T, target string) *wireCounter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	w := &wireCounter{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			w.active.Add(1)
			go func() {
				defer w.active.Done()
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					io.Copy(up, c) // the client's requests, until it goes
					up.Close()
				}()
				io.Copy(c, up)
				if raw, err := c.(*net.TCPConn).SyscallConn(); err == nil {
					raw.Control(func(fd uintptr) {
						if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
							w.acked.Add(int64(info.Bytes_acked))
						}
					})
				}
			}()
		}
	}()
	return w
}

// waitHashed waits until the engine sends the file's Repr-Digest.
func waitHashed(t *testing.T, u string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Head(u)
		if err == nil {
			resp.Body.Close()
			if resp.Header.Get("Repr-Digest") != "" {
				http.DefaultClient.CloseIdleConnections()
				return
			}
		}
	}
	t.Fatalf("%s: no Repr-Digest after 30s", u)
}

// engineBin builds the engine once for the tests that run it as a
// process.
var engineBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "engine-bin-*")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// TestFetchKilled: engine fetch killed with SIGKILL at ten random points
// of one download, then --resume: the file comes out byte for byte, and
// what crossed the wire in all (bytes the client's kernel acknowledged,
// read or not when it died) stays within the file's size plus, per kill,
// a group in flight on every connection and what the client's socket
// buffers held. A group checked but not yet recorded is checked again
// from the part file, never fetched again.
func TestFetchKilled(t *testing.T) {
	bin, err := engineBin()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	const size = 1 << 30
	want := bigRandom(t, filepath.Join(root, "f.bin"), size, 5)
	// Paced (24 MiB/s a connection, 192 MiB/s for 8), so that ten kills
	// land before the end on any machine.
	srv := startServer(t, root, "[[sites]]\ndomain = \"*\"\nlimit_rate = \"24MiB\"\n")
	wire := countWire(t, srv.Addr())
	u := "http://" + wire.addr + "/f.bin"
	out := filepath.Join(t.TempDir(), "f.bin")
	waitHashed(t, u) // so every run starts at once
	before := srv.Stats().BytesFile
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kills, finished := 0, false
	for kills < 10 {
		args := []string{"fetch", u, "-o", out, "--connections", "8", "--resume"}
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); err == nil {
			finished = true // done before the kill: no run after it
			break
		}
		kills++
	}
	r := &fetch.Result{}
	if !finished {
		code, res, errs := fetchJSON(t, u, "-o", out, "--connections", "8", "--resume")
		if code != 0 {
			t.Fatalf("after %d kills, --resume: exit %d\n%s\n%+v", kills, code, errs, res)
		}
		r = res
	}
	if fileDigest(t, out) != want {
		t.Fatalf("after %d kills: the file differs", kills)
	}
	sent := srv.Stats().BytesFile - before
	acked := wire.total(t)
	// Per kill: a partial group on each of 8 connections, and the
	// client's receive buffer on each (loopback autotunes it to a few
	// MiB; 2 MiB each is allowed).
	perKill := int64(8 * (integrity.GroupSize + 2<<20))
	t.Logf("%d kills: %d bytes crossed the wire for a %d-byte file (%.3f of it; the issue's bound without socket buffers: %.3f); the engine wrote %d into its sockets; the last run resumed %d groups, checked %d again, fetched %d bytes",
		kills, acked, size, float64(acked)/size, float64(size+int64(kills)*8*integrity.GroupSize)/size, sent, r.Resumed, r.Rechecked, r.Fetched)
	if kills < 3 {
		t.Fatalf("only %d kills landed before the download ended", kills)
	}
	if acked < size {
		t.Fatalf("only %d bytes counted on the wire for a %d-byte file: the counter is broken", acked, size)
	}
	if acked > size+int64(kills)*perKill {
		t.Errorf("%d bytes crossed the wire, more than the file (%d) and %d per kill", acked, size, perKill)
	}
	if r.Refetched != 0 {
		t.Errorf("the last run fetched %d bytes it did not keep", r.Refetched)
	}
}
