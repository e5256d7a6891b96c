package transport

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/mediaship/engine/internal/fileio"
	"github.com/mediaship/engine/ktls"
)

// Userspace TLS output. Everything a TLS stream sends before promotion
// (heads, frames, bodies of every kind) is laid out by one sealSource as
// the plaintext of full-size records, with gaps left for each record's
// header and tag; file bytes are read straight into those gaps by one
// preadv per run of the same file; then each record is sealed in place.
// This is the only place application data is sealed.

// pumpUser runs the marks at the head of the queue, starts a promotion a
// response asked for, or hands the reactor the seal source.
func (s *Stream) pumpUser() {
	t := s.tls
	for len(t.queue) > 0 && t.queue[0].mark != markNone {
		switch t.queue[0].mark {
		case markClose:
			s.sendAlert(ktls.AlertCloseNotify)
			s.c.CloseAfterFlush()
			t.queue = t.queue[:0]
			t.compact()
			return
		case markKeyUpdate:
			if !s.updateWriteKey() {
				return
			}
		}
		t.queue = t.queue[1:]
	}
	if t.wantPromote {
		t.wantPromote = false
		if s.canPromote() {
			// Between two records: every record sealed so far is on the
			// socket, and the rest of the queue waits for the kernel.
			s.c.Control(s.promote)
			return
		}
	}
	if len(t.queue) > 0 || s.prod != nil {
		t.sealing = true
		s.c.WriteSource(&t.out)
		return
	}
	t.compact()
}

func (t *tlsState) compact() {
	if len(t.queue) == 0 {
		t.queue = t.queue[:0:cap(t.queue)]
		t.arena = t.arena[:0]
		if cap(t.arena) > 64<<10 {
			t.arena = nil
		}
	}
}

// userBody counts n body bytes of r sealed in userspace and asks for
// promotion once the response has passed promote_after.
func (s *Stream) userBody(r *Response, n int64) {
	r.user += n
	if r.user >= s.env.PromoteAfter && s.canPromote() {
		s.tls.wantPromote = true
	}
}

// canPromote: kernel TLS works here, this connection has not failed to
// promote, and it speaks TLS 1.3 (1.2 connections stay in userspace).
func (s *Stream) canPromote() bool {
	t := s.tls
	return s.env.KernelTLS && !t.promoteFailed && !t.promoted && t.sess.Version == tls.VersionTLS13
}

// promote hands transmission to the kernel, between two records: it runs
// once every record sealed so far is on the socket. A failure is not the
// connection's end: it goes on in userspace.
func (s *Stream) promote(fd int) error {
	t, env := s.tls, s.env
	err := ktls.EnableULP(fd)
	if err == nil {
		err = ktls.SetTX(fd, t.writeKeys, t.seal.Seq())
	}
	if err != nil {
		t.promoteFailed = true
		env.Stats.PromoteFailures.Add(1)
		if !env.warned {
			env.warned = true
			env.Log.Warn("promotion to kernel TLS failed; this connection stays in userspace (logged once per loop)", "err", err)
		}
		return nil
	}
	t.promoted = true
	t.kernelRecords = 0
	env.Stats.Promotions.Add(1)
	return nil
}

// pumpKernel hands the queue to the kernel after promotion: plaintext, file
// ranges by sendfile, alerts and KeyUpdates as control messages.
func (s *Stream) pumpKernel() {
	t := s.tls
	for len(t.queue) > 0 {
		p := &t.queue[0]
		switch {
		case p.mark == markClose:
			s.sendAlert(ktls.AlertCloseNotify)
			s.c.CloseAfterFlush()
			t.queue = t.queue[:0]
			t.compact()
			return
		case p.mark == markKeyUpdate:
			if !s.updateWriteKey() {
				return
			}
		case p.body != nil:
			s.sendBody(p.body, p.off, p.n)
		default:
			s.c.Write(p.mem) // a copy: the arena is reused
			s.kernelSent(int64(len(p.mem)))
		}
		t.queue = t.queue[1:]
	}
	t.compact()
}

// updateWriteKey answers a KeyUpdate that requested ours: a KeyUpdate
// record under the old key, then the new key. In the kernel that takes a
// rekey (Linux 6.14); without it the connection closes cleanly instead.
func (s *Stream) updateWriteKey() bool {
	t, env := s.tls, s.env
	next, err := ktls.NextSecret(t.sess.Suite, t.sess.WriteSecret)
	var k ktls.Keys
	if err == nil {
		k, err = ktls.TrafficKeys(t.sess.Suite, next)
	}
	if err != nil {
		s.fatal(ktls.AlertInternalError, err.Error())
		return false
	}
	msg := []byte{24, 0, 0, 1, 0} // KeyUpdate(update_not_requested)
	if t.promoted {
		if !env.KernelRekey {
			// Finish what is queued, then close_notify: the client sees a
			// clean end after complete responses.
			env.Note("client asked for a KeyUpdate this kernel cannot do; closing cleanly", "peer", s.c.Peer())
			t.retire = true
			if !s.closing {
				s.closing = true
				s.prod = nil
				t.queue = append(t.queue, part{mark: markClose})
			}
			return true
		}
		s.c.WriteOOB(msg, ktls.RecordTypeOOB(ktls.RecordHandshake))
		s.c.Control(func(fd int) error { return ktls.SetTX(fd, k, 0) })
	} else {
		rec, err := t.seal.Seal(nil, ktls.RecordHandshake, msg)
		if err != nil {
			s.fatal(ktls.AlertInternalError, err.Error())
			return false
		}
		s.c.Write(rec)
		if t.seal, err = ktls.NewSealer(k, 0); err != nil {
			s.fatal(ktls.AlertInternalError, err.Error())
			return false
		}
	}
	t.sess.WriteSecret = next
	t.writeKeys = k
	return true
}

// sealSource is the reactor Source of a TLS stream in userspace: each
// Next lays out a batch of the queued output, then of the Producer's, and
// returns it sealed.
type sealSource struct {
	// Owned by the loop goroutine.
	s       *Stream
	buf     []byte   // the batch: records with their header and tag gaps
	recs    []record // the batch's records
	plain   int      // plaintext laid out
	limit   int      // plaintext this batch may hold
	nextMax int      // the next record's size limit, when short
	reads   []bodyRead
	iov     [][]byte
	err     error // a Producer overran its budget
}

type record struct{ start, n, max int }

// bodyRead fills iov[first:last] from a body: a file range (body nil)
// read by one preadv, or any other Body by ReadAt.
type bodyRead struct {
	body        Body
	fd          int
	version     fileio.Version // the file's version to hold it to (File.Version)
	off, end    int64
	first, last int
}

// firstRecord bounds the first record of a response body, so the client
// can start on the bytes before a full 16 KiB record has arrived.
const firstRecord = 4096

func (o *sealSource) Next(room int) ([]byte, error) {
	s := o.s
	t := s.tls
	if t.wantPromote || len(t.queue) == 0 && s.prod == nil || len(t.queue) > 0 && t.queue[0].mark != markNone {
		return nil, nil // Pump takes it from here
	}
	o.begin(room)
	var used Producer
	for o.plain < o.limit && !t.wantPromote {
		if len(t.queue) == 0 {
			if s.prod == nil {
				break
			}
			used = s.prod
			if s.prod.Produce(sealSink{o}, o.limit-o.plain) == 0 {
				s.prod = nil
			}
			continue
		}
		p := &t.queue[0]
		if p.mark != markNone {
			break
		}
		if p.body == nil {
			k := o.copyIn(p.mem)
			p.mem = p.mem[k:]
			if len(p.mem) > 0 {
				break // the batch is full
			}
		} else {
			k := p.n
			if s.canPromote() {
				k = min(k, max(s.env.PromoteAfter-p.resp.user, 0))
			}
			k = o.body(p.resp, p.body, p.off, k)
			s.userBody(p.resp, k)
			p.off += k
			p.n -= k
			if p.n > 0 {
				if !t.wantPromote && s.canPromote() && p.resp.user >= s.env.PromoteAfter {
					t.wantPromote = true
				}
				break
			}
		}
		t.queue = t.queue[1:]
	}
	out, err := o.finish()
	if used != nil && err == nil {
		used.Copied()
	}
	if len(t.queue) == 0 {
		t.compact()
	}
	return out, err
}

func (o *sealSource) Release() {
	o.s.env.putBatch(o.buf)
	o.buf = nil
	o.s.tls.sealing = false
}

// begin starts a batch of at most about room bytes (at least a record).
func (o *sealSource) begin(room int) {
	env, seal := o.s.env, o.s.tls.seal
	o.limit = min(env.BatchSize, max(room, ktls.MaxPlaintext))
	if o.buf == nil {
		size := env.BatchSize + (env.BatchSize/firstRecord+2)*seal.Overhead()
		o.buf = env.getBatch(size)
	}
	o.recs = o.recs[:0]
	o.plain = 0
	o.nextMax = 0
	o.err = nil
}

// space returns room for up to want more plaintext bytes in the current
// record, opening a record when it is full; nil when the batch is.
func (o *sealSource) space(want int) []byte {
	want = min(want, o.limit-o.plain)
	if want <= 0 {
		return nil
	}
	seal := o.s.tls.seal
	var r *record
	if k := len(o.recs) - 1; k >= 0 && o.recs[k].n < o.recs[k].max {
		r = &o.recs[k]
	} else {
		start := 0
		if k >= 0 {
			start = o.recs[k].start + o.recs[k].n + seal.Overhead()
		}
		if start+seal.Overhead()+1 > cap(o.buf) {
			return nil
		}
		m := ktls.MaxPlaintext
		if o.nextMax > 0 {
			m, o.nextMax = o.nextMax, 0
		}
		o.recs = append(o.recs, record{start: start, max: m})
		r = &o.recs[k+1]
	}
	at := r.start + seal.Prefix() + r.n
	k := min(want, r.max-r.n, cap(o.buf)-(r.start+seal.Overhead()+r.n))
	if k <= 0 {
		return nil
	}
	r.n += k
	o.plain += k
	return o.buf[at : at+k]
}

// short keeps the record that takes the next bytes (a response body's
// first) to firstRecord bytes.
func (o *sealSource) short() {
	k := len(o.recs) - 1
	switch {
	case k < 0 || o.recs[k].n == o.recs[k].max:
		o.nextMax = firstRecord
	case o.recs[k].n < firstRecord:
		o.recs[k].max = firstRecord
	default:
		o.recs[k].max = o.recs[k].n
		o.nextMax = firstRecord
	}
}

// copyIn copies as much of p as fits into the batch.
func (o *sealSource) copyIn(p []byte) int {
	n := 0
	for n < len(p) {
		dst := o.space(len(p) - n)
		if dst == nil {
			break
		}
		n += copy(dst, p[n:])
	}
	return n
}

// body lays out up to n bytes of b from off, of response r, and returns
// how many fit. Memory is copied now; other bodies are read in finish.
func (o *sealSource) body(r *Response, b Body, off, n int64) int64 {
	if r.user == 0 && n > 0 {
		o.short()
	}
	if m, ok := b.(Mem); ok {
		return int64(o.copyIn(m[off : off+n]))
	}
	f, isFile := b.(File)
	placed := int64(0)
	for placed < n {
		dst := o.space(int(min(n-placed, 1<<30)))
		if dst == nil {
			break
		}
		at := off + placed
		k := len(o.reads) - 1
		switch {
		case isFile && k >= 0 && o.reads[k].body == nil && o.reads[k].fd == f.FD && o.reads[k].version == f.Version &&
			o.reads[k].end == f.Off+at && o.reads[k].last == len(o.iov):
			o.reads[k].end += int64(len(dst))
			o.reads[k].last++
		case isFile:
			o.reads = append(o.reads, bodyRead{fd: f.FD, version: f.Version, off: f.Off + at, end: f.Off + at + int64(len(dst)), first: len(o.iov), last: len(o.iov) + 1})
		default:
			o.reads = append(o.reads, bodyRead{body: b, off: at, end: at + int64(len(dst)), first: len(o.iov), last: len(o.iov) + 1})
		}
		o.iov = append(o.iov, dst)
		placed += int64(len(dst))
	}
	return placed
}

// finish reads the batch's body bytes into place and seals its records.
func (o *sealSource) finish() ([]byte, error) {
	s := o.s
	err := o.err
	for _, r := range o.reads {
		if err != nil {
			break
		}
		bufs := o.iov[r.first:r.last]
		// A body that comes up short (a file that shrank under its
		// promised length) resets the connection: the client sees a short
		// body, never a clean end.
		if r.body == nil {
			_, err = File{FD: r.fd, Version: r.version}.ReadAt(bufs, r.off)
		} else {
			_, err = r.body.ReadAt(bufs, r.off)
		}
	}
	clear(o.iov)
	o.iov, o.reads = o.iov[:0], o.reads[:0]
	if err != nil {
		return nil, fmt.Errorf("transport: body: %w", err)
	}
	if o.plain == 0 {
		return nil, nil
	}
	out := o.buf[:0]
	for _, r := range o.recs {
		if out, err = s.tls.seal.SealAt(o.buf[:r.start], r.start, r.n, ktls.RecordApplicationData); err != nil {
			return nil, err
		}
	}
	s.sent += int64(o.plain)
	s.env.Stats.UserBytes.Add(int64(o.plain))
	s.env.Stats.UserBatches.Add(1)
	return out, nil
}

// sealSink lays a Producer's output into the batch.
type sealSink struct{ o *sealSource }

func (k sealSink) Write(p []byte) {
	if k.o.copyIn(p) < len(p) && k.o.err == nil {
		k.o.err = errors.New("transport: producer overran its budget")
	}
}

func (k sealSink) Body(r *Response, b Body, off, n int64) {
	got := k.o.body(r, b, off, n)
	if got < n && k.o.err == nil {
		k.o.err = errors.New("transport: producer overran its budget")
	}
	k.o.s.userBody(r, got)
}
