package peer

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePorts: distinct ports, each free afterwards for what was asked.
func TestFreePorts(t *testing.T) {
	udp := []bool{false, true, false, true}
	ports, err := FreePorts(udp...)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != len(udp) {
		t.Fatalf("FreePorts returned %d ports, want %d", len(ports), len(udp))
	}
	seen := map[int]bool{}
	for i, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice: %v", p, ports)
		}
		seen[p] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("port %d not free for TCP: %v", p, err)
			continue
		}
		l.Close()
		if udp[i] {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				t.Errorf("port %d not free for UDP: %v", p, err)
				continue
			}
			u.Close()
		}
	}
}

// TestChoosePortsSkipsTakenUDP: a port whose UDP side is taken is not
// chosen where UDP is needed, and is where only TCP is.
func TestChoosePortsSkipsTakenUDP(t *testing.T) {
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	taken := u.LocalAddr().(*net.UDPAddr).Port
	// Candidates: the port whose UDP side is taken first, then any.
	candidates := func() func() (net.Listener, error) {
		first := true
		return func() (net.Listener, error) {
			if first {
				first = false
				return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
			}
			return net.Listen("tcp", "127.0.0.1:0")
		}
	}
	if l, err := candidates()(); err != nil {
		t.Skipf("TCP port %d is taken too, cannot set up the case: %v", taken, err)
	} else {
		l.Close()
	}
	ports, err := choosePorts([]bool{true}, candidates())
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] == taken {
		t.Errorf("choosePorts(udp) = %d, whose UDP port is taken", taken)
	}
	ports, err = choosePorts([]bool{false}, candidates())
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] != taken {
		t.Errorf("choosePorts(tcp only) = %d, want %d (its TCP side is free)", ports[0], taken)
	}
}
