package bench

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// fakeTCP stands in for TCP_INFO: the counters each socket shows now.
type fakeTCP struct {
	now  map[syscall.RawConn]tcpReading
	fail error
}

func (f *fakeTCP) read(raw syscall.RawConn) (tcpReading, error) {
	if f.fail != nil {
		return tcpReading{}, f.fail
	}
	return f.now[raw], nil
}

// loopbackConn is one end of a real TCP connection on loopback.
func loopbackConn(t *testing.T) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c
}

// rawOf is the handle the watch reads c by.
func rawOf(t *testing.T, c net.Conn) syscall.RawConn {
	t.Helper()
	tc, ok := c.(*tcpConn)
	if !ok {
		t.Fatalf("%T not tracked", c)
	}
	return tc.raw
}

// TestTCPWatchBooking: a socket kept across samples is booked as the
// difference since its previous reading, one that closes mid-sample is
// read into that sample, the warmup and the time after the end are in
// none, and a socket that cannot be read is counted as unread.
func TestTCPWatchBooking(t *testing.T) {
	f := &fakeTCP{now: map[syscall.RawConn]tcpReading{}}
	w := newTCPWatch(3)
	w.read = f.read
	a := w.track(loopbackConn(t))
	ra := rawOf(t, a)
	f.now[ra] = tcpReading{retrans: 2, ooo: 1, received: 1000, rtt: 50}
	w.endSample() // end of the warmup: a baseline only

	f.now[ra] = tcpReading{retrans: 5, ooo: 1, received: 5000, rtt: 100, rttvar: 10}
	b := w.track(loopbackConn(t))
	f.now[rawOf(t, b)] = tcpReading{retrans: 1, ooo: 4, received: 700, rtt: 300, rttvar: 30}
	b.Close() // read now, into sample 1
	w.endSample()

	w.endSample() // a did nothing more in sample 2

	f.fail = errors.New("bad descriptor")
	w.endSample() // a cannot be read in sample 3
	f.fail = nil
	f.now[ra] = tcpReading{retrans: 9}
	a.Close() // after the end: in no sample
	w.finish()

	for _, tt := range []struct {
		i                    int
		sockets, unread      int
		retrans, ooo         int64
		rttMedian, rttMax    float64
		rttvarMedian, varMax float64
		wantRate             bool
	}{
		{0, 2, 0, 3 + 1, 0 + 4, 200, 300, 20, 30, true},
		{1, 1, 0, 0, 0, 100, 100, 10, 10, false},
		{2, 0, 1, 0, 0, 0, 0, 0, 0, false},
	} {
		got := w.sample(tt.i)
		if got == nil {
			t.Fatalf("sample %d: nil, want a reading", tt.i+1)
		}
		if got.Sockets != tt.sockets || got.Unread != tt.unread || got.Retransmits != tt.retrans || got.OutOfOrder != tt.ooo {
			t.Errorf("sample %d: sockets %d unread %d retransmits %d out-of-order %d, want %d %d %d %d", tt.i+1,
				got.Sockets, got.Unread, got.Retransmits, got.OutOfOrder, tt.sockets, tt.unread, tt.retrans, tt.ooo)
		}
		if got.RTTMedian != tt.rttMedian || got.RTTMax != tt.rttMax || got.RTTVarMedian != tt.rttvarMedian || got.RTTVarMax != tt.varMax {
			t.Errorf("sample %d: rtt %v/%v rttvar %v/%v, want %v/%v %v/%v", tt.i+1, got.RTTMedian, got.RTTMax,
				got.RTTVarMedian, got.RTTVarMax, tt.rttMedian, tt.rttMax, tt.rttvarMedian, tt.varMax)
		}
		if (got.ReceiveRate > 0) != tt.wantRate {
			t.Errorf("sample %d: receive rate %v, want >0: %v", tt.i+1, got.ReceiveRate, tt.wantRate)
		}
	}
	if w.notMeasured() != "" {
		t.Errorf("notMeasured() = %q, want \"\"", w.notMeasured())
	}
	sum := summarizeTCP([]*TCPSample{w.sample(0), w.sample(1), w.sample(2)})
	if sum == nil || sum.Samples != 2 || sum.RTT.Median != 150 || sum.RTTMax != 300 || sum.Retransmits.Median != 2 {
		t.Errorf("summary %+v, want 2 samples, rtt median 150, max 300, retransmits median 2", sum)
	}
}

// TestTCPWatchNothingRead: when no socket can be read (another system),
// the reason is reported instead of zeros.
func TestTCPWatchNothingRead(t *testing.T) {
	w := newTCPWatch(1)
	w.read = (&fakeTCP{fail: errors.ErrUnsupported}).read
	c := w.track(loopbackConn(t))
	w.endSample()
	w.endSample()
	c.Close()
	if got := w.notMeasured(); got != errors.ErrUnsupported.Error() {
		t.Errorf("notMeasured() = %q, want %q", got, errors.ErrUnsupported.Error())
	}
	if s := w.sample(0); s == nil || s.Sockets != 0 || s.Unread != 1 {
		t.Errorf("sample: %+v, want 1 unread", s)
	}
}
