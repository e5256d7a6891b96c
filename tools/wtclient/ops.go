package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"
	"github.com/zeebo/blake3"
)

const chunk = 64 << 10

// echo: -streams streams at once, each -bytes pattern bytes sent and
// compared with what comes back; then -datagrams datagrams, whose echoes
// are counted (a lost one is reported, not a failure).
func (r *sessionRun) echo(ctx context.Context) error {
	first := r.streamsAtOnce(ctx, r.echoStream)
	if r.c.datagrams > 0 {
		if err := r.echoDatagrams(ctx); err != nil && first == nil {
			first = err
		}
	}
	r.res.Verified = first == nil
	return first
}

// streamsAtOnce runs one func per -streams at once, counts those that
// succeed in streams_ok, and returns the first error.
func (r *sessionRun) streamsAtOnce(ctx context.Context, f func(context.Context) error) error {
	errs := make([]error, r.c.streams)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = f(ctx) })
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err == nil {
			r.res.StreamsOK++
		} else if first == nil {
			first = err
		}
	}
	return first
}

func (r *sessionRun) echoStream(ctx context.Context) error {
	str, err := r.sess.OpenStreamSync(ctx)
	if err != nil {
		r.noteErr(err)
		return fmt.Errorf("opening a stream: %w", err)
	}
	defer deadlineOnDone(ctx, str.SetDeadline)()
	n := r.c.bytes
	wrote := make(chan error, 1)
	go func() { wrote <- r.writePattern(str, n, nil) }()

	buf := make([]byte, chunk)
	var off int64
	var rerr error
	for rerr == nil {
		m, err := str.Read(buf)
		if m > 0 {
			if off+int64(m) > n {
				rerr = fmt.Errorf("stream %d: %d bytes echoed, more than the %d sent", str.StreamID(), off+int64(m), n)
				break
			}
			if i := checkPattern(buf[:m], uint64(off)); i >= 0 {
				rerr = fmt.Errorf("stream %d: echoed byte %d differs from the one sent", str.StreamID(), off+int64(i))
				break
			}
			off += int64(m)
			r.recv.Add(int64(m))
		}
		if err == io.EOF {
			if off != n {
				rerr = fmt.Errorf("stream %d: %d bytes echoed of the %d sent", str.StreamID(), off, n)
			}
			break
		}
		if err != nil {
			r.noteErr(err)
			rerr = fmt.Errorf("stream %d: reading the echo after %d bytes: %w", str.StreamID(), off, err)
		}
	}
	if rerr != nil {
		str.CancelRead(0)
		str.CancelWrite(0)
		<-wrote
		return rerr
	}
	return <-wrote
}

// writePattern writes n pattern bytes from offset 0 on str (and into h,
// if not nil), then finishes str's send side.
func (r *sessionRun) writePattern(str *webtransport.Stream, n int64, h *blake3.Hasher) error {
	buf := make([]byte, chunk)
	for off := int64(0); off < n; {
		b := buf[:min(int64(len(buf)), n-off)]
		fillPattern(b, uint64(off))
		if h != nil {
			h.Write(b)
		}
		m, err := str.Write(b)
		off += int64(m)
		r.sent.Add(int64(m))
		if err != nil {
			r.noteErr(err)
			return fmt.Errorf("stream %d: writing after %d bytes: %w", str.StreamID(), off, err)
		}
	}
	if err := str.Close(); err != nil {
		r.noteErr(err)
		return fmt.Errorf("stream %d: finishing the send side: %w", str.StreamID(), err)
	}
	return nil
}

// echoDatagrams sends -datagrams datagrams of -dgsize bytes and counts
// the echoes that arrive until 1 s after the last was sent.
func (r *sessionRun) echoDatagrams(ctx context.Context) error {
	count, size := int64(r.c.datagrams), r.c.dgsize
	var mu sync.Mutex
	tally := newDatagramTally(count)
	var last time.Time
	rctx, stop := context.WithCancel(ctx)
	received := make(chan struct{})
	go func() {
		defer close(received)
		for {
			b, err := r.sess.ReceiveDatagram(rctx)
			if err != nil {
				return
			}
			mu.Lock()
			if tally.add(b) == nil {
				last = time.Now()
			}
			mu.Unlock()
		}
	}()

	start := time.Now()
	var sent int64
	var sendErr error
	for seq := range uint64(count) {
		if err := r.sess.SendDatagram(makeDatagram(seq, size)); err != nil {
			sendErr = fmt.Errorf("sending datagram %d of %d bytes: %w", seq, size, err)
			break
		}
		sent++
	}
	if sendErr == nil {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		case <-r.sess.Context().Done():
		}
	}
	stop()
	<-received

	mu.Lock()
	defer mu.Unlock()
	st := tally.finish(sent)
	st.Sent, st.Size = sent, int64(size)
	if !last.IsZero() {
		st.ElapsedS = last.Sub(start).Seconds()
	}
	if st.ElapsedS > 0 {
		st.MiBs = float64(st.Bytes) / st.ElapsedS / (1 << 20)
	}
	r.res.Datagrams = st
	if sendErr != nil {
		return sendErr
	}
	if st.Corrupt > 0 || st.OutOfRange > 0 || st.Duplicates > 0 {
		return fmt.Errorf("datagram echoes: %d corrupt, %d out of range, %d duplicates", st.Corrupt, st.OutOfRange, st.Duplicates)
	}
	return nil
}

// source: read the server's one unidirectional stream to its end and check
// it: against Repr-Digest when the response has one, else against the
// pattern; and its length against Engine-Source-Bytes.
func (r *sessionRun) source(ctx context.Context) error {
	rs, err := r.sess.AcceptUniStream(ctx)
	if err != nil {
		r.noteErr(err)
		return fmt.Errorf("accepting the server's stream: %w", err)
	}
	defer deadlineOnDone(ctx, rs.SetReadDeadline)()
	digestHdr, hasDigest := r.res.Headers["Repr-Digest"]

	h := blake3.New()
	buf := make([]byte, chunk)
	var off int64
	firstBad := int64(-1)
	for {
		m, err := rs.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			if !hasDigest && firstBad < 0 {
				if i := checkPattern(buf[:m], uint64(off)); i >= 0 {
					firstBad = off + int64(i)
				}
			}
			off += int64(m)
			r.recv.Add(int64(m))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.noteErr(err)
			return fmt.Errorf("reading the server's stream after %d bytes: %w", off, err)
		}
	}
	sum := h.Sum(nil)
	r.res.Blake3 = hex.EncodeToString(sum)

	var problems []error
	if v, ok := r.res.Headers["Engine-Source-Bytes"]; !ok {
		problems = append(problems, errors.New("the response has no Engine-Source-Bytes"))
	} else if want, err := parseDecimal(v); err != nil {
		problems = append(problems, fmt.Errorf("Engine-Source-Bytes: %v", err))
	} else if off != want {
		problems = append(problems, fmt.Errorf("%d bytes received, Engine-Source-Bytes says %d", off, want))
	}
	if hasDigest {
		if want, err := parseReprDigest(digestHdr); err != nil {
			problems = append(problems, err)
		} else if string(want[:]) != string(sum) {
			problems = append(problems, fmt.Errorf("the bytes' BLAKE3 is %x, Repr-Digest says %x", sum, want))
		}
	} else if firstBad >= 0 {
		problems = append(problems, fmt.Errorf("byte %d is not the pattern", firstBad))
	}
	r.res.Verified = len(problems) == 0
	return errors.Join(problems...)
}

// sink: -streams streams at once, each -bytes pattern bytes and then the
// server's line "<bytes> <blake3 hex>\n" checked against them.
func (r *sessionRun) sink(ctx context.Context) error {
	h := blake3.New()
	var buf [chunk]byte
	for off := int64(0); off < r.c.bytes; off += chunk {
		b := buf[:min(chunk, r.c.bytes-off)]
		fillPattern(b, uint64(off))
		h.Write(b)
	}
	r.res.Blake3 = hex.EncodeToString(h.Sum(nil))
	err := r.streamsAtOnce(ctx, r.sinkStream)
	r.res.Verified = err == nil
	return err
}

func (r *sessionRun) sinkStream(ctx context.Context) error {
	str, err := r.sess.OpenStreamSync(ctx)
	if err != nil {
		r.noteErr(err)
		return fmt.Errorf("opening a stream: %w", err)
	}
	defer deadlineOnDone(ctx, str.SetDeadline)()
	n := r.c.bytes
	h := blake3.New()
	wrote := make(chan error, 1)
	go func() { wrote <- r.writePattern(str, n, h) }()

	// The reply is a line of at most 20 digits, a space, 64 hex digits
	// and a newline; anything longer is wrong anyway.
	reply, rerr := io.ReadAll(io.LimitReader(str, 256))
	r.recv.Add(int64(len(reply)))
	if rerr != nil {
		r.noteErr(rerr)
		str.CancelWrite(0)
		<-wrote
		return fmt.Errorf("stream %d: reading the reply: %w", str.StreamID(), rerr)
	}
	if err := <-wrote; err != nil {
		return err
	}
	got, sum, err := parseSinkReply(reply)
	if err != nil {
		return fmt.Errorf("stream %d: %w", str.StreamID(), err)
	}
	if got != n {
		return fmt.Errorf("stream %d: the server counted %d bytes of the %d sent", str.StreamID(), got, n)
	}
	if want := h.Sum(nil); string(sum[:]) != string(want) {
		return fmt.Errorf("stream %d: the server's BLAKE3 is %x, the bytes sent have %x", str.StreamID(), sum, want)
	}
	return nil
}

// datagramsOp: receive the server's datagrams and its line "<sent>
// <size>\n", wait -grace more, and account for every datagram.
func (r *sessionRun) datagramsOp(ctx context.Context) error {
	// The count asked for, from the URL; if it is not there, nothing is
	// out of range and the loss is counted against what the server sent.
	count := int64(-1)
	if v, err := strconv.ParseInt(r.c.url.Query().Get("count"), 10, 64); err == nil && v >= 0 {
		count = v
	}
	var mu sync.Mutex
	tally := newDatagramTally(count)
	var last time.Time
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	received := make(chan struct{})
	go func() {
		defer close(received)
		for {
			b, err := r.sess.ReceiveDatagram(rctx)
			if err != nil {
				return
			}
			mu.Lock()
			if tally.add(b) == nil {
				last = time.Now()
			}
			mu.Unlock()
		}
	}()

	sent, size, lineErr := r.readDatagramsLine(ctx)
	if lineErr == nil {
		select {
		case <-time.After(r.c.grace):
		case <-ctx.Done():
		case <-r.sess.Context().Done():
		}
	}
	stop()
	<-received

	mu.Lock()
	defer mu.Unlock()
	want := count
	if want < 0 {
		want = sent
	}
	st := tally.finish(want)
	st.Sent, st.Size = sent, size
	if !last.IsZero() {
		st.ElapsedS = last.Sub(r.opened).Seconds()
	}
	if st.ElapsedS > 0 {
		st.MiBs = float64(st.Bytes) / st.ElapsedS / (1 << 20)
	}
	r.res.Datagrams = st
	r.res.Bytes = st.Bytes

	var problems []error
	if lineErr != nil {
		problems = append(problems, lineErr)
	} else {
		if count >= 0 && sent > count {
			problems = append(problems, fmt.Errorf("the server says it sent %d datagrams, %d were asked for", sent, count))
		}
		if st.Received > sent {
			problems = append(problems, fmt.Errorf("%d datagrams received, the server says it sent %d", st.Received, sent))
		}
	}
	if st.Corrupt > 0 || st.OutOfRange > 0 || st.Duplicates > 0 {
		problems = append(problems, fmt.Errorf("datagrams: %d corrupt, %d out of range, %d duplicates", st.Corrupt, st.OutOfRange, st.Duplicates))
	}
	r.res.Verified = len(problems) == 0
	return errors.Join(problems...)
}

func (r *sessionRun) readDatagramsLine(ctx context.Context) (sent, size int64, err error) {
	rs, err := r.sess.AcceptUniStream(ctx)
	if err != nil {
		r.noteErr(err)
		return 0, 0, fmt.Errorf("accepting the server's stream: %w", err)
	}
	defer deadlineOnDone(ctx, rs.SetReadDeadline)()
	line, err := io.ReadAll(io.LimitReader(rs, 256))
	if err != nil {
		r.noteErr(err)
		return 0, 0, fmt.Errorf("reading the server's line: %w", err)
	}
	return parseDatagramsLine(line)
}

// countingDiscard counts what it is given into r.recv.
type countingDiscard struct{ r *sessionRun }

func (w countingDiscard) Write(b []byte) (int, error) {
	w.r.recv.Add(int64(len(b)))
	return len(b), nil
}

// hold: open -streams streams, write a few bytes on each without
// finishing it, and wait for the server to close the session.
func (r *sessionRun) hold(ctx context.Context) error {
	for range r.c.streams {
		// An error here is the session ending (what hold waits for) or
		// the time running out: either way, on to the wait.
		str, err := r.sess.OpenStreamSync(ctx)
		if err != nil {
			r.noteErr(err)
			break
		}
		var b [4]byte
		fillPattern(b[:], 0)
		m, err := str.Write(b[:])
		r.sent.Add(int64(m))
		if err != nil {
			r.noteErr(err)
			break
		}
		r.res.StreamsOK++
		// Read what comes back (an echo, a reset) until the stream ends.
		r.bg.Go(func() {
			_, err := io.Copy(countingDiscard{r}, str)
			r.noteErr(err)
		})
	}
	return r.waitSessionEnd(ctx)
}

// waitSessionEnd waits for the server to end the session; if the run's
// time is up first, that is the error.
func (r *sessionRun) waitSessionEnd(ctx context.Context) error {
	select {
	case <-r.sess.Context().Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the session was still open: %w", context.Cause(ctx))
	}
}

// closeOp: close the session at once with -code and -msg.
func (r *sessionRun) closeOp() error {
	r.sess.CloseWithError(webtransport.SessionErrorCode(r.c.code), r.c.msg)
	select {
	case <-r.sess.Context().Done():
		return nil
	case <-time.After(time.Second):
		return errors.New("the session's context did not end within 1 s of closing it")
	}
}

// flood: one stream, pattern bytes written without end (the echo read
// and dropped) until the stream or the session ends.
func (r *sessionRun) flood(ctx context.Context) error {
	str, err := r.sess.OpenStreamSync(ctx)
	if err != nil {
		r.noteErr(err)
		return fmt.Errorf("opening a stream: %w", err)
	}
	defer deadlineOnDone(ctx, str.SetDeadline)()
	r.bg.Go(func() {
		_, err := io.Copy(countingDiscard{r}, str)
		r.noteErr(err)
	})
	buf := make([]byte, chunk)
	var off uint64
	for {
		fillPattern(buf, off)
		m, err := str.Write(buf)
		off += uint64(m)
		r.sent.Add(int64(m))
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("still writing after %d bytes: %w", off, context.Cause(ctx))
			}
			r.noteErr(err)
			break
		}
	}
	// The stream ended; give the session a moment to end too, so that
	// the report says how.
	select {
	case <-r.sess.Context().Done():
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	return nil
}

// bigDatagram: send one datagram of -dgsize bytes and wait for the server
// to end the session.
func (r *sessionRun) bigDatagram(ctx context.Context) error {
	d := makeDatagram(0, r.c.dgsize)
	// quic-go sizes datagrams by its current packet size estimate, which
	// path MTU discovery raises over the first moments of the
	// connection: a datagram too large for it now may fit shortly.
	giveUp := time.Now().Add(3 * time.Second)
	for {
		err := r.sess.SendDatagram(d)
		if err == nil {
			break
		}
		tooLarge, ok := errors.AsType[*quic.DatagramTooLargeError](err)
		if !ok || time.Now().After(giveUp) || ctx.Err() != nil {
			if ok {
				return fmt.Errorf("sending a %d-byte datagram: QUIC takes at most %d bytes (with the 1-8 bytes of the quarter stream ID): %w", len(d), tooLarge.MaxDatagramPayloadSize, err)
			}
			return fmt.Errorf("sending a %d-byte datagram: %w", len(d), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.sent.Add(int64(len(d)))
	return r.waitSessionEnd(ctx)
}
