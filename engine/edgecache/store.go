package edgecache

import (
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Meta is what the cache keeps beside an object's bytes: the caller's
// (the response's status and fields, when it was stored) and the
// store's (its size and digests).
type Meta struct {
	Key      string      `json:"key"`
	Status   int         `json:"status"`
	Header   [][2]string `json:"header"` // fields to give again, in order
	StoredAt time.Time   `json:"stored_at"`
	Until    time.Time   `json:"until"` // fresh until then (the caller's rule)
	// The origin's validators, for revalidation.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// How long past Until the object may still be served while it is
	// revalidated (stale-while-revalidate) and when the origin fails
	// (stale-if-error), RFC 5861.
	StaleWhileRevalidate time.Duration `json:"stale_while_revalidate,omitempty"`
	StaleIfError         time.Duration `json:"stale_if_error,omitempty"`
	// Filled by the store at Commit.
	Size   int64  `json:"size"`
	BLAKE3 string `json:"blake3"` // hex, of the bytes stored
	SHA256 string `json:"sha256"` // hex, when asked for (Fill.Expect with SHA-256)
	// Verified names the digest the origin stated and the bytes matched
	// ("sha-256", "blake3"), or "" when the origin stated none.
	Verified string `json:"verified"`
	Data     string `json:"data"` // the data file's name, in the object's directory
	// Mtime is the modification time the data file is given (the
	// origin's Last-Modified; zero: when it was written).
	Mtime time.Time `json:"mtime,omitzero"`
	// The data file's identity once complete (its inode and modification
	// time): a file that no longer has it was changed or replaced after
	// it was stored, and is not the object (0: not known).
	FileIno   uint64 `json:"file_ino,omitempty"`
	FileMtime int64  `json:"file_mtime_ns,omitempty"`
}

// unchanged reports whether a data file of identity (ino, size, mtime in
// nanoseconds) is still the object's bytes as stored.
func (o *Object) unchanged(ino uint64, size, mtimeNs int64) bool {
	m := &o.Meta
	return size == m.Size && (m.FileIno == 0 || ino == m.FileIno && mtimeNs == m.FileMtime)
}

// Object is a complete object: its bytes are in Path.
type Object struct {
	Meta Meta
	Path string // the data file
	elem *list.Element
	// used is when the use Touch last recorded on disk was (unix
	// nanoseconds): hits in between touch nothing.
	used atomic.Int64
}

// Rel is the object's data file relative to ObjectsDir, with "/".
func (o *Object) Rel() string {
	return filepath.ToSlash(filepath.Join(filepath.Base(filepath.Dir(o.Path)), filepath.Base(o.Path)))
}

// ObjectsDir is the directory under which the objects' files are.
func (s *Store) ObjectsDir() string { return s.objectsDir() }

// Config sizes a Store.
type Config struct {
	// Dir holds the objects; created when missing.
	Dir string
	// MaxSize bounds the bytes of all objects; past it the least recently
	// used are removed. Zero means no bound but MinFree.
	MaxSize int64
	// MinFree is the free space kept on Dir's file system: an object that
	// would leave less is not stored (and older ones are removed to make
	// room). Zero keeps none.
	MinFree int64
	// MaxFills bounds the fills under way (each an origin fetch and a
	// file growing); zero means no bound.
	MaxFills int
	Logger   *slog.Logger
}

// Store is the objects of one directory.
type Store struct {
	// Immutable after Open.
	cfg  Config
	log  *slog.Logger
	free func(dir string) (int64, error) // the file system's free bytes

	mu       sync.Mutex
	objects  map[string]*Object   // guarded by mu: complete objects by key
	lru      *list.List           // guarded by mu: of *Object, most recently used first
	size     int64                // guarded by mu: bytes of complete objects
	fills    map[string]*Fill     // guarded by mu: fills under way by key
	passes   map[string]time.Time // guarded by mu: keys not to collapse until then (MarkPass)
	reserved int64                // guarded by mu: the room the fills under way claimed (Reserve)

	// Evictions counts objects removed to keep MaxSize and MinFree.
	Evictions atomic.Int64
}

// Errors of a fill.
var (
	ErrDigestMismatch = errors.New("edgecache: the bytes do not match the digest the origin stated")
	ErrNoRoom         = errors.New("edgecache: no room for the object (max_size, min_free)")
	ErrAborted        = errors.New("edgecache: the fill was abandoned")
	ErrPurged         = errors.New("edgecache: a purge named the object while it was fetched; not kept")
)

// Open reads the objects of cfg.Dir that are complete and removes every
// other file there: partial fills, data files no metadata names, and
// metadata whose data is missing or of another size.
func Open(cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg, log: cfg.Logger, free: freeBytes, objects: map[string]*Object{}, lru: list.New(), fills: map[string]*Fill{}, passes: map[string]time.Time{}}
	for _, d := range []string{s.partialDir(), s.objectsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("edgecache: %w", err)
		}
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) partialDir() string { return filepath.Join(s.cfg.Dir, "partial") }
func (s *Store) objectsDir() string { return filepath.Join(s.cfg.Dir, "objects") }

// name is the file name of a key's metadata (a hash: keys hold any
// bytes), and dir the directory it is in.
func (s *Store) name(key string) (dir, name string) {
	h := sha256.Sum256([]byte(key))
	x := hex.EncodeToString(h[:])
	return filepath.Join(s.objectsDir(), x[:2]), x
}

// load indexes the complete objects, oldest use last (the metadata's
// modification time is its last use, written by Touch).
func (s *Store) load() error {
	os.RemoveAll(s.partialDir())
	if err := os.MkdirAll(s.partialDir(), 0o700); err != nil {
		return fmt.Errorf("edgecache: %w", err)
	}
	type found struct {
		o    *Object
		used time.Time
	}
	var all []found
	dirs, err := os.ReadDir(s.objectsDir())
	if err != nil {
		return fmt.Errorf("edgecache: %w", err)
	}
	for _, d := range dirs {
		dir := filepath.Join(s.objectsDir(), d.Name())
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		named := map[string]bool{}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".meta") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			o, used, err := s.readMeta(dir, p)
			if err != nil {
				s.log.Warn("edgecache: an object's metadata is unreadable or does not match its data; removed", "file", p, "err", err)
				os.Remove(p)
				continue
			}
			named[o.Meta.Data] = true
			all = append(all, found{o, used})
		}
		for _, e := range ents {
			if n := e.Name(); !strings.HasSuffix(n, ".meta") && !named[n] {
				os.Remove(filepath.Join(dir, n)) // a data file no metadata names: a fill cut short, or an object replaced
			}
		}
	}
	// Most recently used first.
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].used.After(all[j-1].used); j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	for _, f := range all {
		f.o.elem = s.lru.PushBack(f.o)
		s.objects[f.o.Meta.Key] = f.o
		s.size += f.o.Meta.Size
	}
	return nil
}

func (s *Store) readMeta(dir, p string) (*Object, time.Time, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, time.Time{}, err
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, time.Time{}, err
	}
	if _, want := s.name(m.Key); filepath.Base(p) != want+".meta" || m.Data == "" || strings.ContainsAny(m.Data, `/\`) {
		return nil, time.Time{}, errors.New("metadata for another key")
	}
	data := filepath.Join(dir, m.Data)
	fi, err := os.Stat(data)
	if err != nil {
		return nil, time.Time{}, err
	}
	if fi.Size() != m.Size {
		return nil, time.Time{}, fmt.Errorf("data of %d bytes, metadata says %d", fi.Size(), m.Size)
	}
	if o := (&Object{Meta: m}); !o.unchanged(fileIno(fi), fi.Size(), fi.ModTime().UnixNano()) {
		return nil, time.Time{}, errors.New("the data file was changed or replaced after it was stored")
	}
	mi, err := os.Stat(p)
	if err != nil {
		return nil, time.Time{}, err
	}
	o := &Object{Meta: m, Path: data}
	o.used.Store(mi.ModTime().UnixNano())
	return o, mi.ModTime(), nil
}

// Lookup returns the complete object of key, counted as used, or nil.
func (s *Store) Lookup(key string) *Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[key]
	if o != nil {
		s.lru.MoveToFront(o.elem)
	}
	return o
}

// Peek returns the complete object of key without counting a use.
func (s *Store) Peek(key string) *Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[key]
}

// Reserve claims room for n more bytes of fill f, or reports that there
// is none: within MaxSize and leaving MinFree once every complete object
// went (eviction makes that room at Commit), less what the fills under
// way claimed, which eviction cannot free. (The free space already lacks
// what those fills wrote: counting their claims whole errs on the side
// of room.) A fill's claim ends with it.
func (f *Fill) Reserve(n int64) bool {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.MaxSize > 0 && s.reserved+n > s.cfg.MaxSize {
		return false
	}
	if s.cfg.MinFree > 0 {
		free, err := s.free(s.cfg.Dir)
		if err != nil || free+s.size-s.reserved-n < s.cfg.MinFree {
			return false
		}
	}
	s.reserved += n
	f.reserved += n
	return true
}

// Refresh gives object o new metadata (a revalidation's: its freshness
// and fields; the bytes, size and digests stay o's) and returns the
// object as it now is. The metadata is replaced by a rename: a crash
// leaves the old or the new, whole.
func (s *Store) Refresh(o *Object, meta Meta) (*Object, error) {
	m := o.Meta
	m.Status, m.Header, m.StoredAt, m.Until = meta.Status, meta.Header, meta.StoredAt, meta.Until
	m.ETag, m.LastModified = meta.ETag, meta.LastModified
	m.StaleWhileRevalidate, m.StaleIfError = meta.StaleWhileRevalidate, meta.StaleIfError
	b, err := json.Marshal(&m)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(s.partialDir(), randomName()+".meta")
	if err := writeSynced(tmp, b); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objects[m.Key] != o {
		os.Remove(tmp)
		return nil, errors.New("edgecache: the object was replaced or removed while it was revalidated")
	}
	dir, name := s.name(m.Key)
	if err := os.Rename(tmp, filepath.Join(dir, name+".meta")); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	n := &Object{Meta: m, Path: o.Path, elem: o.elem}
	n.used.Store(time.Now().UnixNano()) // the metadata was just written
	n.elem.Value = n
	s.objects[m.Key] = n
	return n, nil
}

// maxPasses bounds the keys MarkPass remembers.
const maxPasses = 1 << 16

// MarkPass has requests of key go to the origin one by one, not
// collapsed into one fetch, until then: the origin said its response to
// one client is not for others (Varnish's hit-for-miss).
func (s *Store) MarkPass(key string, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.passes) >= maxPasses {
		now := time.Now()
		for k, t := range s.passes {
			if !now.Before(t) {
				delete(s.passes, k)
			}
		}
		if len(s.passes) >= maxPasses {
			clear(s.passes) // they come back, one fetch each
		}
	}
	s.passes[key] = until
}

// Passing reports whether key is marked by MarkPass at now.
func (s *Store) Passing(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.passes[key]
	if ok && !now.Before(t) {
		delete(s.passes, key)
		return false
	}
	return ok
}

// Touch records that o was used, on disk, for the order of eviction
// after a restart; at most once a minute per object.
// It touches no file in between (a loop calls it on every hit): the
// metadata's time is set on a goroutine of its own.
func (s *Store) Touch(o *Object) {
	now := time.Now()
	last := o.used.Load()
	if now.UnixNano()-last <= int64(time.Minute) || !o.used.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	dir, name := s.name(o.Meta.Key)
	go os.Chtimes(filepath.Join(dir, name+".meta"), now, now)
}

// Size is the bytes of the complete objects.
func (s *Store) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// Len is the number of complete objects.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Purge removes the objects whose key is key, or, with prefix set,
// starts with it, and has the fills under way of such keys keep nothing
// (their readers still get the bytes: what they asked for was being
// fetched when the purge came). It returns how many objects and fills.
// Readers that opened an object keep reading it (its file is unlinked,
// not truncated).
func (s *Store) Purge(key string, prefix bool) (objects, fills int) {
	s.mu.Lock()
	var gone []*Object
	for k, o := range s.objects {
		if k == key || prefix && strings.HasPrefix(k, key) {
			gone = append(gone, o)
			s.dropLocked(o)
		}
	}
	for k, f := range s.fills {
		if k == key || prefix && strings.HasPrefix(k, key) {
			f.purged = true
			fills++
		}
	}
	for k := range s.passes {
		if k == key || prefix && strings.HasPrefix(k, key) {
			delete(s.passes, k)
		}
	}
	s.mu.Unlock()
	for _, o := range gone {
		s.removeFiles(o)
	}
	return len(gone), fills
}

// dropLocked takes o out of the index.
func (s *Store) dropLocked(o *Object) {
	delete(s.objects, o.Meta.Key)
	s.lru.Remove(o.elem)
	s.size -= o.Meta.Size
}

// removeFiles unlinks o's metadata first (it is then no longer
// complete, even after a crash), then its data.
func (s *Store) removeFiles(o *Object) {
	dir, name := s.name(o.Meta.Key)
	meta := filepath.Join(dir, name+".meta")
	if b, err := os.ReadFile(meta); err == nil {
		var m Meta
		if json.Unmarshal(b, &m) == nil && m.Data == o.Meta.Data {
			os.Remove(meta) // not a newer object's
		}
	}
	os.Remove(o.Path)
}

// makeRoomLocked removes the least recently used objects until n more
// bytes fit under MaxSize and MinFree. It returns the objects to remove
// (their files, outside the lock) and whether n fits.
func (s *Store) makeRoomLocked(n int64) ([]*Object, bool) {
	// What can never fit evicts nothing.
	if s.cfg.MaxSize > 0 && n > s.cfg.MaxSize {
		return nil, false
	}
	if s.cfg.MinFree > 0 {
		if free, err := s.free(s.cfg.Dir); err != nil || free+s.size-n < s.cfg.MinFree {
			return nil, false
		}
	}
	var gone []*Object
	freed := int64(0)
	for {
		fits := s.cfg.MaxSize == 0 || s.size+n <= s.cfg.MaxSize
		if fits && s.cfg.MinFree > 0 {
			free, err := s.free(s.cfg.Dir)
			fits = err == nil && free+freed-n >= s.cfg.MinFree
		}
		if fits {
			return gone, true
		}
		back := s.lru.Back()
		if back == nil {
			return gone, false
		}
		o := back.Value.(*Object)
		s.dropLocked(o)
		s.Evictions.Add(1)
		freed += o.Meta.Size
		gone = append(gone, o)
	}
}

// randomName is a fresh data file name.
func randomName() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
