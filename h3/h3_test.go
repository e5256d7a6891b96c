package h3

import (
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// fakeClock is a Pacer's clock in tests: time moves only when the pacer
// sleeps, by the duration asked plus overshoot (a real sleep's lateness).
type fakeClock struct {
	t         time.Time
	overshoot time.Duration
	sleeps    []time.Duration
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) sleep(d time.Duration) {
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d + c.overshoot)
}

func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newFakePacer(rate int64) (*Pacer, *fakeClock) {
	c := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	return newPacer(rate, c.now, c.sleep), c
}

// TestPacer: the bucket's arithmetic on a fake clock, step by step. At
// 1,000,000 bytes per second a millisecond is 1000 bytes and the burst is
// 16 KiB (10 ms, 10,000 bytes, is less than the floor).
func TestPacer(t *testing.T) {
	p, clk := newFakePacer(1_000_000)
	if p.burst != 16384 {
		t.Fatalf("burst %v, want 16384 (the 16 KiB floor)", p.burst)
	}
	if q := NewPacer(100 << 20); q.burst != float64(100<<20)/100 {
		t.Errorf("100 MiB/s burst %v, want 10 ms worth", q.burst)
	}
	limit := func(max, want int) {
		t.Helper()
		if got := p.Limit(max); got != want {
			t.Errorf("Limit(%d) with %.1f tokens before = %d, want %d", max, p.tokens+float64(got), got, want)
		}
	}
	wait := func(n int, want time.Duration) {
		t.Helper()
		if got := p.Wait(n); got < want-time.Nanosecond || got > want+time.Nanosecond {
			t.Errorf("Wait(%d) = %v, want %v", n, got, want)
		}
	}

	// A new pacer starts full: one burst at once, then nothing until time
	// passes.
	limit(16384, 16384)
	limit(1, 0)
	wait(1000, time.Millisecond)
	wait(4096, 4096*time.Microsecond)
	// Waits are for half the burst at most: a sleep that overshoots
	// then still refills below the cap, and no tokens are lost.
	wait(1<<20, 8192*time.Microsecond)

	// Whole frames or nothing: 1.5 ms is 1500 tokens, too few for 1600.
	clk.advance(1500 * time.Microsecond)
	limit(1600, 0)
	limit(1200, 1200)
	limit(300, 300) // exactly what is left
	limit(1, 0)
	// The deficit: 1000 tokens for a 1200-byte frame with 700 left.
	clk.advance(700 * time.Microsecond)
	wait(1200, 500*time.Microsecond)
	wait(100, 0)

	// Long idle fills the bucket to the burst and no further.
	clk.advance(time.Hour)
	limit(16385, 0)
	limit(16384, 16384)
	limit(1, 0)
	if len(clk.sleeps) != 0 {
		t.Errorf("Limit and Wait slept %v; only Sleep may", clk.sleeps)
	}
}

// paceSchedule sends total bytes through p in frames of 1200 (the last
// one shorter) the way Body.write does: Limit, and Sleep with what is left
// when held back. It checks at each step
// that no more was granted than the burst plus the rate since the start.
// It returns the fake time the transfer took.
func paceSchedule(t *testing.T, p *Pacer, clk *fakeClock, total int) time.Duration {
	t.Helper()
	begin := clk.t
	for sent := 0; sent < total; {
		frame := min(1200, total-sent)
		switch n := p.Limit(frame); n {
		case frame:
			sent += n
			if allowed := p.burst + clk.t.Sub(begin).Seconds()*p.rate; float64(sent) > allowed+1e-6 {
				t.Fatalf("after %v: %d bytes granted, more than the burst plus the rate allow (%.0f)", clk.t.Sub(begin), sent, allowed)
			}
		case 0:
			before := len(clk.sleeps)
			if before > total {
				t.Fatalf("%d sleeps for %d bytes: the writer is going round without sending", before, total)
			}
			p.Sleep(total - sent)
			if len(clk.sleeps) != before+1 || clk.sleeps[before] <= 0 {
				t.Fatalf("rate %v: held back from %d of %d with %.6f tokens, but Sleep slept %v", p.rate, frame, total-sent, p.tokens, clk.sleeps[before:])
			}
		default:
			t.Fatalf("Limit(%d) = %d: a sliver, not a whole frame", frame, n)
		}
	}
	return clk.t.Sub(begin)
}

// TestPacerSchedule: over a whole transfer the pacer holds its rate, even
// when every sleep overshoots (by less than half the burst's time), and
// sleeps about 200 times a second at most.
func TestPacerSchedule(t *testing.T) {
	for _, tt := range []struct {
		rate      int64
		overshoot time.Duration
	}{
		{1_000_000, 0},
		{1_000_000, 3 * time.Millisecond}, // half the burst is 8.192 ms
		{8 << 20, 0},
		{8 << 20, 2 * time.Millisecond}, // half the burst is 5 ms
		{100 << 20, 4 * time.Millisecond},
	} {
		p, clk := newFakePacer(tt.rate)
		clk.overshoot = tt.overshoot
		total := int(tt.rate) * 2 // two seconds' worth
		took := paceSchedule(t, p, clk, total)
		// The first burst goes at once; the rest at the rate, give or
		// take a frame and one sleep's overshoot.
		ideal := time.Duration((float64(total) - p.burst) / p.rate * float64(time.Second))
		if slack := time.Duration(1200/p.rate*float64(time.Second)) + tt.overshoot; took < ideal-slack || took > ideal+slack {
			t.Errorf("rate %d, overshoot %v: %d bytes took %v, want %v ± %v", tt.rate, tt.overshoot, total, took, ideal, slack)
		}
		// Each sleep is followed by at least half a burst, less a frame.
		if perSec, most := float64(len(clk.sleeps))/took.Seconds(), p.rate/(p.burst/2-1200)+1; perSec > most {
			t.Errorf("rate %d, overshoot %v: %.0f sleeps a second, want at most %.0f", tt.rate, tt.overshoot, perSec, most)
		}
	}

	// A sleep that overshoots by more than the other half of the burst
	// loses what overflows the bucket: the cap holds, and the stream
	// runs slower than its rate rather than bursting.
	p, clk := newFakePacer(1_000_000)
	clk.overshoot = 20 * time.Millisecond
	took := paceSchedule(t, p, clk, 2_000_000)
	if got := 2_000_000 / took.Seconds(); got > 0.95*p.rate {
		t.Errorf("with 20 ms overshoot: %.0f bytes a second, want well under the rate (tokens past the burst are lost)", got)
	}
}

// TestCloseCode: errors are named by side and code, and codes a peer
// picks freely fold into one key each.
func TestCloseCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&quic.ApplicationError{ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeNoError)}, ""},
		{&quic.ApplicationError{ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeFrameUnexpected)}, "local H3_FRAME_UNEXPECTED"},
		{&quic.ApplicationError{Remote: true, ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad)}, "remote H3_EXCESSIVE_LOAD"},
		{&quic.ApplicationError{Remote: true, ErrorCode: 0x1234567}, "remote other application error"},
		{&quic.TransportError{ErrorCode: quic.StreamLimitError}, "local STREAM_LIMIT_ERROR"},
		{&quic.TransportError{Remote: true, ErrorCode: 0x12a}, "remote CRYPTO_ERROR"},
		{&quic.TransportError{Remote: true, ErrorCode: 0x7777}, "remote other transport error"},
		{&quic.TransportError{ErrorCode: quic.NoError}, ""},
		{&quic.IdleTimeoutError{}, ""},
		{&quic.HandshakeTimeoutError{}, "local handshake timeout"},
		{fmt.Errorf("wrapped: %w", &quic.ApplicationError{ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeIDError)}), "local H3_ID_ERROR"},
	} {
		if got := closeCode(tt.err); got != tt.want {
			t.Errorf("closeCode(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
