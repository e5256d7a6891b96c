package h3

import (
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestPacer: the bucket grants whole frames only, refills at the rate up
// to the burst, and says how long to wait.
func TestPacer(t *testing.T) {
	p := NewPacer(1 << 20) // 1 MiB/s: burst 16 KiB (10 ms is less)
	if p.burst != 16<<10 {
		t.Fatalf("burst %v", p.burst)
	}
	now := time.Now()
	p.last = now
	p.tokens = 1000
	if n := p.Limit(1200); n != 0 {
		t.Errorf("Limit(1200) with 1000 tokens = %d, want 0 (no slivers)", n)
	}
	p.mu.Lock()
	p.tokens, p.last = 1000, time.Now()
	p.mu.Unlock()
	if n := p.Limit(800); n != 800 {
		t.Errorf("Limit(800) with 1000 tokens = %d", n)
	}
	p.mu.Lock()
	p.tokens, p.last = 0, time.Now()
	p.mu.Unlock()
	w := p.Wait(4 << 10)
	if want := time.Second * 4 / 1024; w < want*9/10 || w > want {
		t.Errorf("Wait(4 KiB) at 1 MiB/s from empty = %v, want about %v", w, want)
	}
	if w := p.Wait(1 << 20); w > 9*time.Millisecond {
		t.Errorf("Wait beyond the burst = %v; it should be capped at half the burst (8 ms)", w)
	}
	p.mu.Lock()
	p.tokens, p.last = 0, time.Now().Add(-time.Hour)
	p.mu.Unlock()
	p.Limit(0)
	if p.tokens != p.burst {
		t.Errorf("after an hour idle: %v tokens, want the burst %v", p.tokens, p.burst)
	}
	if q := NewPacer(100 << 20); q.burst != float64(100<<20)/100 {
		t.Errorf("100 MiB/s burst %v, want 10 ms worth", q.burst)
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
