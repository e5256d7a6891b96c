package h3

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http/httpguts"
)

// Pacer is a token bucket that limits one stream's sending rate. Its Limit
// method is the limiter quic.SendStream.WriteWithLimit calls while
// packing, on quic-go's goroutine; the writer calls Sleep when Limit held
// the stream back.
type Pacer struct {
	// Immutable after newPacer.
	rate  float64 // bytes per second
	burst float64
	now   func() time.Time    // time.Now outside tests
	sleep func(time.Duration) // time.Sleep outside tests

	mu     sync.Mutex // guards tokens and last
	tokens float64
	last   time.Time
}

// NewPacer returns a pacer for rate bytes per second. Its burst is 10 ms
// of the rate, at least 16 KiB: short enough that the rate holds over any
// fraction of a second, long enough that the writer, which waits for half
// a burst at a time, sleeps about two hundred times a second at most.
func NewPacer(rate int64) *Pacer { return newPacer(rate, time.Now, time.Sleep) }

// newPacer is NewPacer on a given clock.
func newPacer(rate int64, now func() time.Time, sleep func(time.Duration)) *Pacer {
	burst := max(float64(rate)/100, 16<<10)
	return &Pacer{rate: float64(rate), burst: burst, now: now, sleep: sleep, tokens: burst, last: now()}
}

// Rate returns the pacer's rate in bytes per second.
func (p *Pacer) Rate() int64 { return int64(p.rate) }

func (p *Pacer) refillLocked() {
	now := p.now()
	p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	p.last = now
}

// Limit grants a STREAM frame of up to max bytes the whole of max or
// nothing, so a paced stream sends full packets, not slivers.
func (p *Pacer) Limit(max int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	if p.tokens < float64(max) {
		return 0
	}
	p.tokens -= float64(max)
	return max
}

// Wait returns how long until n bytes, or half the burst if less, may be
// sent. Waiting for half, not all, of the burst leaves room for the
// sleep's overshoot: tokens refilled past the burst would be lost, and
// the stream would run slower than its rate. The wait is rounded up to
// the nanosecond, so a deficit of a fraction of a byte is never a wait of
// zero that sends the writer round again with the bucket unchanged.
func (p *Pacer) Wait(n int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	need := min(float64(n), p.burst/2) - p.tokens
	if need <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(need * float64(time.Second) / p.rate))
}

// Sleep sleeps for Wait(n).
func (p *Pacer) Sleep(n int) { p.sleep(p.Wait(n)) }

// FrameHeaderRoom is the space to leave before a DATA payload in a buffer
// given to Body.WriteFrame: the largest DATA frame header.
const FrameHeaderRoom = 16

// Body writes a response body as HTTP/3 DATA frames straight onto the
// request's QUIC stream, paced when it has a Pacer.
type Body struct {
	str     *quic.Stream
	pacer   *Pacer
	timeout time.Duration
	sent    int64
}

// ErrStalled is returned when the client took no bytes for the send
// timeout. The stream is left as it is: the caller resets it with Abort.
var ErrStalled = errors.New("h3: client accepted no data within the send timeout")

// TakeOver sends the response head (WriteHeader must have been called)
// and returns the stream for the body. pacer may be nil; timeout bounds
// each wait for the client's flow control or acknowledgements.
func TakeOver(w http.ResponseWriter, pacer *Pacer, timeout time.Duration) (*Body, error) {
	hs, ok := w.(http3.HTTPStreamer)
	if !ok {
		return nil, errors.New("h3: response writer cannot hand over its stream")
	}
	str, err := hs.HTTPStream()
	if err != nil {
		return nil, err
	}
	return &Body{str: str.QUICStream(), pacer: pacer, timeout: timeout}, nil
}

// Sent returns the body bytes written so far (frame headers excluded).
func (b *Body) Sent() int64 { return b.sent }

// SetPriority sets the stream's RFC 9218 urgency and incremental flag for
// quic-go's scheduler.
func (b *Body) SetPriority(urgency int8, incremental bool) { b.str.SetPriority(urgency, incremental) }

// WriteFrame writes one DATA frame whose payload is buf[FrameHeaderRoom:];
// buf[:FrameHeaderRoom] is scratch for the frame header.
func (b *Body) WriteFrame(buf []byte) error {
	n := len(buf) - FrameHeaderRoom
	if n <= 0 {
		return nil
	}
	hl := 1 + quicvarint.Len(uint64(n)) // type 0x00 (DATA), length
	start := FrameHeaderRoom - hl
	h := buf[start:start]
	h = quicvarint.Append(h, 0x00)
	quicvarint.Append(h, uint64(n))
	if err := b.write(buf[start:]); err != nil {
		return err
	}
	b.sent += int64(n)
	return nil
}

// write writes p, waiting for the pacer when it holds the stream back.
func (b *Body) write(p []byte) error {
	var limit func(int) int
	if b.pacer != nil {
		limit = b.pacer.Limit
	}
	for len(p) > 0 {
		if b.timeout > 0 {
			b.str.SetWriteDeadline(time.Now().Add(b.timeout))
		}
		n, err := b.str.WriteWithLimit(p, limit)
		p = p[n:]
		switch {
		case err == nil:
		case errors.Is(err, quic.ErrWriteLimitReached):
			b.pacer.Sleep(len(p))
		case isTimeout(err):
			return ErrStalled
		default:
			return err
		}
	}
	return nil
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// WriteTrailers writes a HEADERS frame of trailer fields after the body
// (RFC 9114 §4.1), QPACK-encoded without the dynamic table; Close must
// follow. Fields that may not be trailers are left out.
func (b *Body) WriteTrailers(h http.Header) error {
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for k, vs := range h {
		if !httpguts.ValidTrailerHeader(k) {
			continue
		}
		for _, v := range vs {
			if err := enc.WriteField(qpack.HeaderField{Name: strings.ToLower(k), Value: v}); err != nil {
				return err
			}
		}
	}
	if block.Len() == 0 {
		return nil
	}
	frame := quicvarint.Append(nil, 0x01) // HEADERS
	frame = quicvarint.Append(frame, uint64(block.Len()))
	return b.write(append(frame, block.Bytes()...))
}

// Close ends the body (FIN) and discards anything more the client sends.
func (b *Body) Close() {
	b.str.Close()
	b.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
}

// Abort resets the stream: the client learns the body is incomplete.
func (b *Body) Abort(code http3.ErrCode) {
	b.str.CancelWrite(quic.StreamErrorCode(code))
	b.str.CancelRead(quic.StreamErrorCode(code))
}

// ClientGone reports whether err says the client reset or stopped the
// stream, or the connection ended.
func ClientGone(err error) bool {
	if se, ok := errors.AsType[*quic.StreamError](err); ok {
		return se.Remote
	}
	_, app := errors.AsType[*quic.ApplicationError](err)
	_, idle := errors.AsType[*quic.IdleTimeoutError](err)
	return app || idle
}
