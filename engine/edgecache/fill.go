package edgecache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/zeebo/blake3"
)

// Fill is one object being written: by its leader, from the origin,
// while any number of readers read what has landed.
type Fill struct {
	// Immutable after Begin.
	s    *Store
	key  string
	f    *os.File // the partial data file (Open); closed when the last holder releases
	path string   // its name in the partial directory
	data string   // the name it takes among the objects

	// Owned by the leader: the writer's side.
	b3     *blake3.Hasher
	sha    hash.Hash // when a SHA-256 is expected
	expect []expected

	reserved int64 // guarded by s.mu: the room this fill claimed
	purged   bool  // guarded by s.mu: a purge named it; its bytes are not kept

	mu      sync.Mutex
	written int64         // guarded by mu: bytes in f
	done    bool          // guarded by mu: no more bytes will come
	err     error         // guarded by mu: why the fill failed (when done)
	stored  *Object       // guarded by mu: the object it became, when stored
	more    chan struct{} // guarded by mu: closed (and replaced) when written grows or done is set, if waited
	waited  bool          // guarded by mu: Wait handed out more since it was last closed
	holders int           // guarded by mu: the leader and the readers not yet released
	ready   chan struct{} // closed by SetHead, Settle, or the fill's end
	told    bool          // guarded by mu: ready is closed
	answer  any           // guarded by mu: the caller's account of the answer (SetHead, Settle)
	bytes   bool          // guarded by mu: SetHead (bytes follow), not Settle
	size    int64         // guarded by mu: the body's length SetHead gave (-1: unknown)
}

// Ready is closed once the leader has said how the fill's readers are
// answered (SetHead or Settle).
func (f *Fill) Ready() <-chan struct{} { return f.ready }

// SetHead says the object's bytes follow: v is the caller's account of
// the response (its status and fields), size the body's length (-1 when
// only its end will tell). The leader calls it once, after Open.
func (f *Fill) SetHead(v any, size int64) {
	f.mu.Lock()
	f.answer, f.bytes, f.size = v, true, size
	f.tellLocked()
	f.mu.Unlock()
}

// tellLocked closes ready, once.
func (f *Fill) tellLocked() {
	if !f.told {
		f.told = true
		close(f.ready)
	}
}

// Settle ends a fill that brings no bytes: v is the caller's account of
// what its readers answer instead (another object, an error, the
// origin's own answer to each of them).
func (f *Fill) Settle(v any) {
	f.mu.Lock()
	f.answer = v
	f.tellLocked()
	f.mu.Unlock()
	f.finish(nil, nil)
}

// Answer is what SetHead or Settle gave, once Ready: v, whether bytes
// follow, and their length. A fill that ended before either (its leader
// gave up) answers nil, false.
func (f *Fill) Answer() (v any, bytes bool, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answer, f.bytes, f.size
}

// Join returns the fill under way for key, held by the caller (who
// Releases it); nil when there is none.
func (s *Store) Join(key string) *Fill {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fills[key]
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return nil
	}
	f.holders++
	return f
}

// Begin returns the fill of key: the one under way (leader false), or a
// new one whose leader the caller is; nil when MaxFills are under way.
// Every caller Releases what it got. It touches no file (a loop may call
// it): the leader Opens the fill.
func (s *Store) Begin(key string) (f *Fill, leader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fills[key]; f != nil {
		f.mu.Lock()
		f.holders++
		f.mu.Unlock()
		return f, false
	}
	if s.cfg.MaxFills > 0 && len(s.fills) >= s.cfg.MaxFills {
		return nil, false
	}
	name := randomName()
	f = &Fill{s: s, key: key, path: filepath.Join(s.partialDir(), name), data: name, b3: blake3.New(),
		more: make(chan struct{}), ready: make(chan struct{}), holders: 1}
	s.fills[key] = f
	return f, true
}

// Hold adds a holder to a fill the caller holds (the leader's, for a
// reader of its own); it too Releases it.
func (f *Fill) Hold() {
	f.mu.Lock()
	f.holders++
	f.mu.Unlock()
}

// Open creates the fill's data file (the leader's, before SetHead).
func (f *Fill) Open() error {
	file, err := os.OpenFile(f.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("edgecache: %w", err)
	}
	f.f = file
	return nil
}

// expected is a digest the bytes must match.
type expected struct {
	alg string
	sum []byte
}

// Expect has Commit check the bytes against a digest the origin stated:
// alg is "sha-256" or "blake3". Every one given must match (an origin
// that states two that disagree states no object). Call it before the
// first Write.
func (f *Fill) Expect(alg string, sum []byte) {
	f.expect = append(f.expect, expected{alg, sum})
	if alg == "sha-256" && f.sha == nil {
		f.sha = sha256.New()
	}
}

// AlsoSHA256 has the fill compute the bytes' SHA-256 (Meta.SHA256)
// though no SHA-256 is expected. Call it before the first Write.
func (f *Fill) AlsoSHA256() {
	if f.sha == nil {
		f.sha = sha256.New()
	}
}

// Write appends p (the leader's, after Open).
func (f *Fill) Write(p []byte) (int, error) {
	n, err := f.f.Write(p)
	f.b3.Write(p[:n])
	if f.sha != nil {
		f.sha.Write(p[:n])
	}
	f.mu.Lock()
	f.written += int64(n)
	f.wakeLocked()
	f.mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("edgecache: %w", err)
	}
	return n, nil
}

// wakeLocked wakes the waiters, if any: a write nobody waits for
// (the leader's, on a loop) makes no channel.
func (f *Fill) wakeLocked() {
	if !f.waited {
		return
	}
	close(f.more)
	f.more, f.waited = make(chan struct{}), false
}

// Written is the bytes that have landed.
func (f *Fill) Written() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written
}

// State reports whether the fill is over, and if so why it failed (nil:
// its bytes are all there and matched what the origin stated; they may
// still not be stored, for lack of room).
func (f *Fill) State() (done bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done, f.err
}

// Wait returns a channel closed once more than off bytes have landed or
// the fill is over.
func (f *Fill) Wait(off int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.written > off || f.done {
		return closed
	}
	f.waited = true
	return f.more
}

// closed is a channel closed for good: Wait's answer when it need not
// wait.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ReadAt reads landed bytes at off: 0 and nil when none has landed there
// yet (Wait), io.EOF past the end of a complete fill, the fill's error
// past the bytes of a failed one.
func (f *Fill) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	written, done, err := f.written, f.done, f.err
	f.mu.Unlock()
	if off >= written {
		switch {
		case !done:
			return 0, nil
		case err != nil:
			return 0, err
		default:
			return 0, io.EOF
		}
	}
	if int64(len(p)) > written-off {
		p = p[:written-off]
	}
	return f.f.ReadAt(p, off)
}

// File is the fill's data file, for reading its landed bytes (no more
// than Written says) by other means than ReadAt, such as sendfile; it
// stays open while the caller holds the fill.
func (f *Fill) File() *os.File { return f.f }

// Commit ends the leader's writing: the bytes are checked against what
// the origin stated (a mismatch fails the fill: ErrDigestMismatch), then
// stored as key's complete object with meta (its Size, digests and Data
// filled in), replacing any older one. ErrNoRoom means the bytes were
// good but are not kept.
func (f *Fill) Commit(meta Meta) (*Object, error) {
	size := f.Written()
	meta.Key, meta.Size, meta.Data = f.key, size, f.data
	meta.BLAKE3 = hex.EncodeToString(f.b3.Sum(nil))
	if f.sha != nil {
		meta.SHA256 = hex.EncodeToString(f.sha.Sum(nil))
	}
	for _, e := range f.expect {
		var got string
		switch e.alg {
		case "sha-256":
			got = meta.SHA256
		case "blake3":
			got = meta.BLAKE3
		}
		if got == "" || got != hex.EncodeToString(e.sum) {
			err := fmt.Errorf("%w (%s: origin %x, bytes %s)", ErrDigestMismatch, e.alg, e.sum, got)
			f.finish(err, nil)
			return nil, err
		}
		if meta.Verified == "" {
			meta.Verified = e.alg
		}
	}
	if meta.StoredAt.IsZero() {
		meta.StoredAt = time.Now()
	}
	o, err := f.store(meta)
	if err != nil {
		f.finish(nil, nil) // the bytes are good: readers finish; nothing is kept
		return nil, err
	}
	f.finish(nil, o)
	return o, nil
}

// store makes the fill key's object: data synced, metadata written and
// synced beside it, the data renamed among the objects, then the
// metadata (the object is complete from that rename on).
func (f *Fill) store(meta Meta) (*Object, error) {
	s := f.s
	s.mu.Lock()
	if f.purged {
		s.mu.Unlock()
		return nil, ErrPurged
	}
	gone, fits := s.makeRoomLocked(meta.Size)
	if fits {
		// Counted from now: a store beside this one makes room with
		// these bytes in view, never both in the same room.
		s.size += meta.Size
	}
	s.mu.Unlock()
	for _, o := range gone {
		s.removeFiles(o)
	}
	if !fits {
		return nil, ErrNoRoom
	}
	o, err := f.place(meta)
	s.mu.Lock()
	if err != nil || f.purged {
		s.size -= meta.Size
		s.mu.Unlock()
		if err == nil {
			s.removeFiles(o) // purged while it was placed
			err = ErrPurged
		}
		return nil, err
	}
	old := s.objects[f.key]
	if old != nil {
		s.dropLocked(old)
	}
	o.elem = s.lru.PushFront(o)
	s.objects[f.key] = o
	s.mu.Unlock()
	if old != nil && old.Path != o.Path {
		os.Remove(old.Path) // its metadata was replaced by the rename
	}
	return o, nil
}

// place writes the fill's object to disk: data synced, metadata written
// and synced beside it, the data renamed among the objects, then the
// metadata (the object is complete from that rename on).
func (f *Fill) place(meta Meta) (*Object, error) {
	s := f.s
	if err := f.f.Sync(); err != nil {
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	if !meta.Mtime.IsZero() {
		os.Chtimes(f.path, meta.Mtime, meta.Mtime)
	}
	fi, err := f.f.Stat()
	if err != nil {
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	meta.FileIno, meta.FileMtime = fileIno(fi), fi.ModTime().UnixNano()
	b, err := json.Marshal(&meta)
	if err != nil {
		return nil, err
	}
	tmpMeta := f.path + ".meta"
	if err := writeSynced(tmpMeta, b); err != nil {
		return nil, err
	}
	dir, name := s.name(f.key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		os.Remove(tmpMeta)
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	data := filepath.Join(dir, f.data)
	if err := os.Rename(f.path, data); err != nil {
		os.Remove(tmpMeta)
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	if err := os.Rename(tmpMeta, filepath.Join(dir, name+".meta")); err != nil {
		os.Remove(tmpMeta)
		os.Remove(data)
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	syncDir(dir)
	o := &Object{Meta: meta, Path: data}
	o.used.Store(time.Now().UnixNano()) // its metadata was just written
	return o, nil
}

// Abort ends the fill as failed (the origin went away, or sent bytes
// that are not the object): readers see err past the landed bytes and
// must not finish their responses cleanly.
func (f *Fill) Abort(err error) {
	if err == nil {
		err = ErrAborted
	}
	f.finish(err, nil)
}

// finish ends the fill once: it leaves the store's fills, and its
// partial file goes unless it became an object.
func (f *Fill) finish(err error, o *Object) {
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		return
	}
	f.done, f.err, f.stored = true, err, o
	f.wakeLocked()
	f.tellLocked()
	f.mu.Unlock()
	s := f.s
	s.mu.Lock()
	if s.fills[f.key] == f {
		delete(s.fills, f.key)
	}
	s.reserved -= f.reserved
	f.reserved = 0
	s.mu.Unlock()
	if o == nil {
		os.Remove(f.path)
	}
}

// Release ends the caller's hold on the fill (the leader's too, after
// Commit or Abort); the last one closes its file. A leader that releases
// a fill it neither committed nor aborted aborts it.
func (f *Fill) Release(leader bool) {
	if leader {
		f.mu.Lock()
		done := f.done
		f.mu.Unlock()
		if !done {
			f.Abort(ErrAborted)
		}
	}
	f.mu.Lock()
	f.holders--
	last := f.holders == 0
	f.mu.Unlock()
	if last && f.f != nil {
		f.f.Close()
	}
}

func writeSynced(p string, b []byte) error {
	file, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("edgecache: %w", err)
	}
	_, err = io.Copy(file, bytes.NewReader(b))
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
		return fmt.Errorf("edgecache: %w", err)
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
