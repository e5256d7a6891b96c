package engine

import (
	"os"
	"testing"

	"github.com/mediaship/engine/internal/reuseport"
)

// TestSameAddrLocalhost: a handed-over localhost socket (the wildcard
// bound to the loopback device) is taken for listen = "localhost:…" and
// never for a wildcard listen, and a plain wildcard socket the other way
// round: an upgrade keeps each listener's reach.
func TestSameAddrLocalhost(t *testing.T) {
	open := func(addr string) *os.File {
		fd, _, err := reuseport.Listen(addr, false)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), addr)
		t.Cleanup(func() { f.Close() })
		return f
	}
	lo, wild := open("localhost:0"), open(":0")
	for _, tc := range []struct {
		f    *os.File
		addr string
		want bool
	}{
		{lo, "localhost:0", true},
		{lo, ":0", false},
		{lo, "[::]:0", false},
		{wild, ":0", true},
		{wild, "localhost:0", false},
	} {
		if got := sameAddr(tc.f, tc.addr); got != tc.want {
			t.Errorf("sameAddr(%s socket, %q) = %v, want %v", tc.f.Name(), tc.addr, got, tc.want)
		}
	}
}
