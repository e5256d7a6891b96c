package reuseport

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSteerQUIC sends QUIC-shaped datagrams to a group of two
// generations' sockets and checks which socket each reaches: a short or
// Handshake header by the first byte of its Destination Connection ID,
// an Initial (and an ID no generation holds) to the current generation,
// which SetCurrent moves.
func TestSteerQUIC(t *testing.T) {
	fd1, bound, err := ListenUDP("127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd1)
	st, err := SteerQUIC(fd1, 1)
	if err != nil {
		// Only a missing privilege excuses it: a program the verifier
		// refuses is this package's bug.
		if os.Getenv("ENGINE_REQUIRE_EBPF") != "" || !errors.Is(err, unix.EPERM) {
			t.Fatalf("SteerQUIC: %v; eBPF steering required (ENGINE_REQUIRE_EBPF)", err)
		}
		t.Skipf("eBPF steering not available: %v", err)
	}
	defer st.Close()
	fd2, bound2, err := ListenUDP(bound, false)
	if err != nil || bound2 != bound {
		t.Fatalf("second socket: %q, %v", bound2, err)
	}
	closed2 := false
	defer func() {
		if !closed2 {
			unix.Close(fd2)
		}
	}()
	if err := st.Add(2, fd2); err != nil {
		t.Fatal(err)
	}
	if fd, _, err := ListenUDP(bound, true); err == nil {
		unix.Close(fd)
		t.Error("ListenUDP with checkFree joined a port in use")
	}
	c, err := net.Dial("udp", bound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short := func(gen byte) []byte { return append([]byte{0x40, gen}, make([]byte, 40)...) }
	long := func(typ, gen byte) []byte {
		return append([]byte{0xc0 | typ<<4, 0, 0, 0, 1, 12, gen}, make([]byte, 40)...)
	}
	// A client's first Initial: its own 8-byte ID.
	first := func(b0 byte) []byte {
		return append([]byte{0xc0, 0, 0, 0, 1, 8, b0}, make([]byte, 40)...)
	}
	got := func() int {
		t.Helper()
		buf := make([]byte, 2048)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			for i, fd := range []int{fd1, fd2} {
				if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err == nil {
					return i + 1
				}
			}
		}
		t.Fatal("the datagram reached neither socket")
		return 0
	}
	for _, tt := range []struct {
		name string
		cur  uint8
		d    []byte
		want int
	}{
		{"short, generation 1", 1, short(1), 1},
		{"short, generation 2", 1, short(2), 2},
		{"short, unknown generation", 1, short(9), 1},
		{"a first Initial (the client's ID)", 1, first(2), 1},
		{"a later Initial (generation 2's ID)", 1, long(0, 2), 1},
		{"0-RTT", 1, long(1, 2), 1},
		{"Handshake, generation 2", 1, long(2, 2), 2},
		{"a first Initial after SetCurrent(2)", 2, first(1), 2},
		{"a later Initial of generation 1 after SetCurrent(2)", 2, long(0, 1), 2},
		{"short, generation 1, after SetCurrent(2)", 2, short(1), 1},
		{"short, unknown generation, after SetCurrent(2)", 2, short(77), 2},
		{"too short for a header", 2, []byte{0x40}, 2},
	} {
		if err := st.SetCurrent(tt.cur); err != nil {
			t.Fatal(err)
		}
		// What a failed case left queued does not count for the next.
		for _, fd := range []int{fd1, fd2} {
			for {
				if _, _, err := unix.Recvfrom(fd, make([]byte, 2048), unix.MSG_DONTWAIT); err != nil {
					break
				}
			}
		}
		// One client address throughout: the kernel's hash would send
		// every datagram to the same socket.
		for range 3 {
			if _, err := c.Write(tt.d); err != nil {
				t.Fatal(err)
			}
			if s := got(); s != tt.want {
				t.Errorf("%s: reached generation %d's socket, want %d's", tt.name, s, tt.want)
				break
			}
		}
	}
	// A client with a relayed flow: every datagram of its address goes to
	// the generation that relays it, whatever the ID, until it is dropped.
	st.SetCurrent(1)
	client := netip.MustParseAddrPort(c.LocalAddr().String())
	if err := st.HoldRelay(client, 2); err != nil {
		t.Fatal(err)
	}
	for _, d := range [][]byte{short(9), short(1), long(2, 7)} {
		c.Write(d)
		if s := got(); s != 2 {
			t.Errorf("a relayed client's datagram %x reached %d, want 2", d[:7], s)
		}
	}
	// A first Initial from that address is a new connection: current.
	c.Write(first(2))
	if s := got(); s != 1 {
		t.Errorf("a first Initial from a relayed client's address reached %d, want the current 1", s)
	}
	st.DropRelay(client)
	c.Write(short(9))
	if s := got(); s != 1 {
		t.Errorf("after DropRelay, reached %d, want the current 1", s)
	}

	// A socket that closes leaves the group; its generation's packets go
	// to the current one.
	unix.Close(fd2)
	closed2 = true
	st.SetCurrent(1)
	c.Write(short(2))
	if s := got(); s != 1 {
		t.Errorf("after generation 2's socket closed, its packet reached %d", s)
	}
}
