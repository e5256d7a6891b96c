package testnet

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestRefusedAddr: a connection to the address is refused, again and
// again, and nobody can listen there meanwhile.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("a connection to %s was accepted", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if runtime.GOOS == "windows" {
		return
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("another socket could listen on %s while it is held", addr)
	}
}
