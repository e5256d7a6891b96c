package bench

import (
	"fmt"
	"io"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/integrity"
)

// Body reading. A worker reads each response body into large buffers and
// checks it with a verifier. A body that fits in one buffer is hashed on
// the worker itself: a goroutine hop would cost more than it saves. A
// longer one is pipelined: the worker keeps reading (and, over TLS,
// decrypting) while a hasher goroutine of its own hashes the buffers it
// has handed over, so the two run on different cores.

// bodyBuffer is the size of one read buffer, and pipeDepth how many a
// worker may have (allocated on first use, then reused: no allocation per
// read or per response). A body longer than one buffer may have 2 MiB in
// flight to its hasher: enough slack that neither side waits for the
// other when the scheduler runs a third goroutine (the server's, in a
// self-check) on one of two cores. With 2 buffers the TLS self-check was
// a fifth slower; 8 and 16 measured the same.
const (
	bodyBuffer = 256 << 10
	pipeDepth  = 8
)

// verifier counts and hashes one body and judges it at the end, with the
// same verdicts as integrity.Reader: ErrTooLong as soon as more than size
// bytes arrived, ErrTruncated when the body ended early or its read
// failed, ErrMismatch when the digest differs. It is reset for each
// response, so its hasher is reused.
type verifier struct {
	h    *blake3.Hasher
	n    int64
	size int64             // >= 0
	want *integrity.Digest // nil: length only, nothing hashed
	err  error             // the first failure, once known
}

func (v *verifier) reset(size int64, want *integrity.Digest) {
	if v.h == nil {
		v.h = blake3.New()
	}
	v.h.Reset()
	v.n, v.size, v.want, v.err = 0, size, want, nil
}

// write hashes the next bytes of the body.
func (v *verifier) write(p []byte) {
	if v.err != nil {
		return
	}
	v.n += int64(len(p))
	if v.n > v.size {
		v.err = fmt.Errorf("%w: more than %d bytes", integrity.ErrTooLong, v.size)
		return
	}
	if v.want != nil {
		v.h.Write(p)
	}
}

// finish judges the body once its reading ended with readErr (nil: at
// EOF).
func (v *verifier) finish(readErr error) error {
	switch {
	case v.err != nil:
	case readErr != nil:
		v.err = fmt.Errorf("%w after %d of %d bytes: %v", integrity.ErrTruncated, v.n, v.size, readErr)
	case v.n < v.size:
		v.err = fmt.Errorf("%w: %d of %d bytes", integrity.ErrTruncated, v.n, v.size)
	case v.want != nil:
		var got integrity.Digest
		v.h.Sum(got[:0])
		if got != *v.want {
			v.err = fmt.Errorf("%w: got %s, want %s", integrity.ErrMismatch, got, *v.want)
		}
	}
	return v.err
}

// piece is one hand-off from a worker to its hasher: a filled buffer
// and, on the body's last, how its reading ended.
type piece struct {
	buf     *[]byte
	n       int
	last    bool
	readErr error
}

// bodyReader reads and verifies the bodies of one worker's responses,
// one at a time.
type bodyReader struct {
	// Owned by the worker goroutine; never touched by the hasher.
	bufs    int     // buffers allocated so far, at most pipeDepth
	inline  *[]byte // the buffer a body starts in
	started bool    // the hasher goroutine runs

	// The hasher's: between a body's first piece sent and its verdict
	// received, v belongs to the hasher goroutine, otherwise to the
	// worker. The channels are the only doors between the two.
	v       verifier
	pieces  chan piece   // worker -> hasher
	free    chan *[]byte // hasher -> worker: hashed buffers, to read into again
	verdict chan error   // hasher -> worker: one per pipelined body
}

func newBodyReader() *bodyReader {
	return &bodyReader{
		pieces:  make(chan piece, pipeDepth),
		free:    make(chan *[]byte, pipeDepth),
		verdict: make(chan error, 1),
	}
}

// close ends the hasher goroutine, if any. The bodyReader is not used
// after.
func (b *bodyReader) close() {
	if b.started {
		close(b.pieces)
	}
}

// buffer returns an empty buffer to read into: a new one while fewer than
// pipeDepth exist, else the next one the hasher is done with.
func (b *bodyReader) buffer() *[]byte {
	select {
	case p := <-b.free:
		return p
	default:
	}
	if b.bufs < pipeDepth {
		b.bufs++
		p := make([]byte, bodyBuffer)
		return &p
	}
	return <-b.free
}

// scratch is a buffer for reading a body that is already judged wrong.
func (b *bodyReader) scratch() []byte {
	if b.inline == nil {
		b.inline = b.buffer()
	}
	return *b.inline
}

// hasher runs for the life of its worker: it hashes each piece, hands
// its buffer back, and answers a body's last piece with the verdict.
func (b *bodyReader) hasher() {
	for p := range b.pieces {
		b.v.write((*p.buf)[:p.n])
		b.free <- p.buf
		if p.last {
			b.verdict <- b.v.finish(p.readErr)
		}
	}
}

// read reads body to its end and judges it: the exact length size and,
// when want is set, its BLAKE3 digest. arrive is told of every read as it
// returns. It returns the verdict (nil: right) and the error the reading
// ended with, if not EOF.
func (b *bodyReader) read(body io.Reader, size int64, want *integrity.Digest, arrive func(int)) (verdict, readErr error) {
	b.v.reset(size, want)
	if b.inline == nil {
		b.inline = b.buffer()
	}
	var total int64
	// fill reads into buf until it is full, the body ends or more than
	// size bytes have arrived (the verifier then rejects it: reading on
	// would only wait for bytes that cannot help).
	fill := func(buf []byte) (int, error) {
		n := 0
		for n < len(buf) && total <= size {
			k, err := body.Read(buf[n:])
			if k > 0 {
				n += k
				total += int64(k)
				arrive(k)
			}
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}
	n, err := fill(*b.inline)
	if err != nil || total > size {
		// The body ended (or overran) within one buffer: hash it here.
		if err == io.EOF {
			err = nil
		}
		b.v.write((*b.inline)[:n])
		return b.v.finish(err), err
	}
	if !b.started {
		b.started = true
		go b.hasher()
	}
	// The first buffer goes to the hasher; the next body starts in a
	// buffer it has handed back.
	buf := b.inline
	b.inline = nil
	for err == nil && total <= size {
		b.pieces <- piece{buf: buf, n: n}
		buf = b.buffer()
		n, err = fill(*buf)
	}
	if err == io.EOF {
		err = nil
	}
	b.pieces <- piece{buf: buf, n: n, last: true, readErr: err}
	verdict = <-b.verdict
	b.inline = b.buffer()
	return verdict, err
}
