package files

import (
	"errors"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/internal/fileio"
)

// Kind says what a path turned out to be.
type Kind uint8

const (
	KindFile      Kind = iota + 1 // a regular file, open
	KindDir                       // a directory
	KindMissing                   // no such file
	KindForbidden                 // exists but may not be served (permissions, escaping symlink, not a regular file)
	KindError                     // any other failure; answered with 500
)

// Entry is what the cache knows about one path beneath one root.
type Entry struct {
	// Immutable after construction.
	Kind         Kind
	Size         int64
	ModTime      time.Time
	ETag         string // strong, quoted
	LastModified string // IMF-fixdate
	ContentType  string
	// Small holds the whole content of a small file, read at open, so a
	// small response is one write. Nil for larger files.
	Small []byte
	Err   error // for KindError and KindForbidden: why, for the log

	fd  int
	dev uint64
	ino uint64
	// ctimeNs and nlink are the change time and link count at open:
	// what tells bytes rewritten in place from the ones hashed
	// (integrity.FileID, fileio.Version).
	ctimeNs int64
	nlink   uint64
	key     string
	rel     string
	dir     string       // directory watched for changes to this entry
	abs     string       // dir + "/" + base name: what inotify events name
	refs    atomic.Int32 // holders: the cache while it lists the entry, and each response; any goroutine
	gone    atomic.Bool  // removed from the cache; the last Release closes fd
	// viaHidden: the path resolved through a symbolic link to a dotfile
	// or into a dot directory beneath the root.
	viaHidden bool

	// Set once the content's digest is known (from a digest cache, a
	// manifest, or hashing); read by any goroutine.
	digest atomic.Pointer[Digest]
	// Which precompressed sidecars of this file may be served, once
	// looked up (bits in encoding.go). True for the entry's lifetime: the
	// cache drops the entry when a sidecar of it changes. Any goroutine.
	sidecars atomic.Uint32
}

// Digest is what the integrity layer learned about an entry's content.
type Digest struct {
	Sum    [32]byte
	ETag   string // strong, derived from Sum: replicas agree on it
	Header string // Repr-Digest value: "blake3=:...:", and ", sha-256=:...:" with SHA256
	// SHA256 is the file's SHA-256 when [integrity] digests asks for it;
	// HeaderB3 and HeaderSHA are Header's members alone, for clients
	// that want one (Want-Repr-Digest).
	SHA256              *[32]byte
	HeaderB3, HeaderSHA string
	// Corrupt marks content that contradicts a trusted manifest under
	// the "refuse" policy: answered with 500.
	Corrupt bool
}

// Digest returns the entry's digest, or nil while it is not known.
func (e *Entry) Digest() *Digest { return e.digest.Load() }

// SetDigest records the entry's digest.
func (e *Entry) SetDigest(d *Digest) { e.digest.Store(d) }

// Ref takes another reference, for work that outlives the request (hashing
// the file in the background). Release it when done.
func (e *Entry) Ref() { e.refs.Add(1) }

// Identity returns what identifies the entry's content without reading
// it: device, inode, size, and modification and change times.
func (e *Entry) Identity() (dev, ino uint64, size, mtimeNs, ctimeNs int64) {
	return e.dev, e.ino, e.Size, e.ModTime.UnixNano(), e.ctimeNs
}

// Version is the file's version at open, which responses for it hold it
// to while they send (fileio.Changed).
func (e *Entry) Version() fileio.Version {
	return fileio.Version{CtimeNs: e.ctimeNs, MtimeNs: e.ModTime.UnixNano(), Nlink: e.nlink}
}

// Rel returns the entry's path relative to its root.
func (e *Entry) Rel() string { return e.rel }

// currentETag is the digest-derived ETag once known, else the one from
// size and modification time.
func (e *Entry) currentETag() string {
	if d := e.digest.Load(); d != nil {
		return d.ETag
	}
	return e.ETag
}

// Fd returns the open descriptor of a KindFile entry.
func (e *Entry) Fd() int { return e.fd }

// Release drops a reference taken by Lookup or Open.
func (e *Entry) Release() {
	if e.refs.Add(-1) == 0 && e.fd > 0 {
		closeFd(e.fd)
	}
}

// Root is a directory files are served from.
type Root struct {
	Dir string
	// FollowOutside lets symbolic links lead outside Dir.
	FollowOutside bool

	fd   int // O_PATH descriptor of Dir, for openat2
	id   string
	real string // Dir with every symbolic link resolved; "" when unknown
}

// Config tunes a Cache. The zero value of each field means its default.
type Config struct {
	// MaxEntries bounds the number of cached paths (and so the files held
	// open). Zero means DefaultMaxEntries.
	MaxEntries int
	// SmallFileBytes is the size up to which a file's content is kept in
	// memory. Zero means 32 KiB; negative disables it.
	SmallFileBytes int64
	// MaxSmallBytes bounds the memory held by small-file contents.
	// Zero means 64 MiB.
	MaxSmallBytes int64
	// Revalidate is how often every entry is checked against the disk by
	// stat, catching changes inotify cannot see (a parent directory
	// renamed, a symlink target changed). Zero means 5s.
	Revalidate time.Duration
	// KnownDigest, when set, is asked (on a worker, at open) for a digest
	// already known for a file: from a digest cache or a manifest.
	KnownDigest func(root *Root, e *Entry) *Digest
	// Outboards, when set, is the directory of the files' outboard trees
	// (OutboardName): a request for a file's path + ".obao" is answered
	// with its tree, and the file's responses link to it.
	Outboards *Root
	Logger    *slog.Logger
}

// DefaultMaxEntries is the cache size when Config.MaxEntries is zero.
const DefaultMaxEntries = 4096

// Cache maps paths to open files. Lookup is safe from any goroutine and
// never blocks on the disk; Open blocks and belongs on a worker pool.
type Cache struct {
	// Immutable after construction.
	cfg Config
	log *slog.Logger
	w   *watcher // nil when inotify is unavailable: nothing is cached
	// outboardSite serves trees from cfg.Outboards; nil without them.
	outboardSite *Site

	mu         sync.RWMutex        // guards the four fields below: Lookup and Len read; Open, invalidations and revalidation write
	m          map[string]*Entry   // guarded by mu; key -> entry
	byPath     map[string][]*Entry // guarded by mu; absolute path -> entries (one per root)
	smallBytes int64               // guarded by mu
	negative   int                 // guarded by mu; entries for missing or forbidden paths

	stop chan struct{}
	done chan struct{}

	// Counters, independent of each other and of mu: added to by any
	// goroutine, read by stats.
	Hits, Misses, Invalidations atomic.Int64
}

// NewCache starts a cache. Close stops it.
func NewCache(cfg Config) *Cache {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.SmallFileBytes == 0 {
		cfg.SmallFileBytes = 32 << 10
	}
	if cfg.MaxSmallBytes <= 0 {
		cfg.MaxSmallBytes = 64 << 20
	}
	if cfg.Revalidate <= 0 {
		cfg.Revalidate = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{cfg: cfg, log: cfg.Logger, m: make(map[string]*Entry), byPath: make(map[string][]*Entry), stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Outboards != nil {
		// A tree is served only with its own digest: one the cache does
		// not know is checked against its root first (503 meanwhile).
		c.outboardSite = &Site{Root: cfg.Outboards, RequireDigest: true}
	}
	w, err := newWatcher(c.invalidateDir, c.invalidateAll)
	if err != nil {
		c.log.Warn("open-file cache disabled: cannot watch files for changes; every request opens its file", "err", err)
	} else {
		c.w = w
	}
	go c.revalidateLoop()
	return c
}

// Close stops the cache's goroutines and drops every entry.
func (c *Cache) Close() {
	close(c.stop)
	<-c.done
	c.invalidateAll()
	if c.w != nil {
		c.w.close()
	}
}

// NewRoot opens dir for serving.
func NewRoot(dir string, followOutside bool) (*Root, error) {
	fd, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	r := &Root{Dir: dir, FollowOutside: followOutside, fd: fd, real: fdPath(fd)}
	r.id = strconv.Itoa(fd) + ":"
	return r, nil
}

// Key returns the cache key of rel beneath r.
func (r *Root) Key(rel []byte) string { return r.id + string(rel) }

// keyBytes builds the key into buf without allocating.
func (r *Root) keyBytes(buf []byte, rel []byte) []byte {
	buf = append(buf[:0], r.id...)
	return append(buf, rel...)
}

// Lookup returns the cached entry for rel beneath root with a reference
// held, or nil on a miss. It never touches the disk. buf is scratch space
// for the key.
func (c *Cache) Lookup(root *Root, rel []byte, buf []byte) (*Entry, []byte) {
	buf = root.keyBytes(buf, rel)
	c.mu.RLock()
	e := c.m[string(buf)]
	if e != nil {
		e.refs.Add(1)
	}
	c.mu.RUnlock()
	if e == nil {
		c.Misses.Add(1)
	} else {
		c.Hits.Add(1)
	}
	return e, buf
}

// Open opens rel beneath root, caches the result when the cache can watch
// it for changes, and returns it with a reference held. It blocks on the
// disk: call it from a worker, never from a reactor.
func (c *Cache) Open(root *Root, rel string) *Entry {
	key := root.id + rel
	dir := root.Dir
	if i := lastSlash(rel); i >= 0 {
		dir += "/" + rel[:i]
	}
	// Watch before opening, so a change between the open and the watch
	// cannot be missed.
	watched := false
	if c.w != nil {
		watched = c.w.add(dir) == nil
	}
	e := openEntry(root, rel, c.cfg.SmallFileBytes)
	e.key, e.rel, e.dir, e.abs = key, rel, dir, root.Dir+"/"+rel
	if e.Kind == KindFile && c.cfg.KnownDigest != nil {
		if d := c.cfg.KnownDigest(root, e); d != nil {
			e.digest.Store(d)
		}
	}
	e.refs.Store(1) // the caller's
	if !watched || e.Kind == KindError {
		if watched {
			c.w.release(dir)
		}
		return e
	}

	c.mu.Lock()
	if old := c.m[key]; old != nil {
		// Another worker opened it first; keep theirs.
		old.refs.Add(1)
		c.mu.Unlock()
		c.w.release(dir)
		e.Release()
		return old
	}
	switch {
	case e.negative() && c.negative >= c.cfg.MaxEntries/4:
		// Entries for paths that do not exist cost an attacker nothing
		// to make (a flood of 404s); they may hold a quarter of the
		// cache and replace each other, never the files being served.
		c.evictOneLocked(true)
	case len(c.m) >= c.cfg.MaxEntries:
		c.evictOneLocked(c.negative > 0)
	}
	if e.negative() {
		c.negative++
	}
	if e.Small != nil {
		if c.smallBytes+int64(len(e.Small)) > c.cfg.MaxSmallBytes {
			e.Small = nil
		} else {
			c.smallBytes += int64(len(e.Small))
		}
	}
	e.refs.Add(1) // the cache's
	c.m[key] = e
	c.byPath[e.abs] = append(c.byPath[e.abs], e)
	c.mu.Unlock()
	return e
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// evictOneLocked drops an arbitrary entry (Go's map order is random enough
// to stand in for a clock), a negative one when negative is set and one
// turns up among the first few looked at.
func (c *Cache) evictOneLocked(negative bool) {
	var victim *Entry
	tries := 0
	for _, e := range c.m {
		if victim == nil {
			victim = e
		}
		if !negative || e.negative() {
			victim = e
			break
		}
		if tries++; tries == 64 {
			break
		}
	}
	if victim != nil {
		c.removeLocked(victim.key, victim)
	}
}

// negative reports whether e records that a path cannot be served.
func (e *Entry) negative() bool { return e.Kind == KindMissing || e.Kind == KindForbidden }

func (c *Cache) removeLocked(k string, e *Entry) {
	delete(c.m, k)
	list := c.byPath[e.abs]
	for i := range list {
		if list[i] == e {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.byPath, e.abs)
	} else {
		c.byPath[e.abs] = list
	}
	if e.Small != nil {
		c.smallBytes -= int64(len(e.Small))
	}
	if e.negative() {
		c.negative--
	}
	e.gone.Store(true)
	if c.w != nil {
		c.w.release(e.dir)
	}
	c.Invalidations.Add(1)
	e.Release()
}

// invalidateDir drops the entries for name in dir, or every entry in and
// below dir when name is empty (the directory itself went away).
func (c *Cache) invalidateDir(dir, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name != "" {
		c.removePathLocked(dir + "/" + name)
		if base, ok := SidecarOf(name); ok {
			// The file's entry remembers what its sidecars were.
			c.removePathLocked(dir + "/" + base)
		}
		return
	}
	for k, e := range c.m {
		if e.dir == dir || strings.HasPrefix(e.dir, dir+"/") {
			c.removeLocked(k, e)
		}
	}
}

// removePathLocked drops the entries of an absolute path (one per root).
func (c *Cache) removePathLocked(abs string) {
	for _, e := range append([]*Entry(nil), c.byPath[abs]...) {
		c.removeLocked(e.key, e)
	}
}

func (c *Cache) invalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		c.removeLocked(k, e)
	}
}

// Len returns the number of cached entries.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// revalidateLoop stats every entry now and then and drops those whose
// file changed in a way inotify on its directory would not report.
func (c *Cache) revalidateLoop() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.Revalidate)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.mu.RLock()
		list := make([]*Entry, 0, len(c.m))
		for _, e := range c.m {
			list = append(list, e)
		}
		c.mu.RUnlock()
		for _, e := range list {
			if !e.gone.Load() && !stillSame(e) {
				c.mu.Lock()
				if c.m[e.key] == e {
					c.removeLocked(e.key, e)
					// A sidecar that changed unseen (a symbolic link
					// retargeted) drops its file's entry too, as an event
					// would; a forbidden one is only retried, not changed.
					if base, ok := SidecarOf(e.abs); ok && e.Kind != KindForbidden {
						c.removePathLocked(base)
					}
				}
				c.mu.Unlock()
			}
		}
	}
}

// classify maps an open error to the kind of answer it deserves.
func classify(err error) Kind {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errNotDir), errors.Is(err, errNameTooLong):
		return KindMissing
	case errors.Is(err, fs.ErrPermission), errors.Is(err, errEscapes), errors.Is(err, errLoop):
		return KindForbidden
	}
	return KindError
}

func httpDate(t time.Time) string { return t.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT") }

// makeETag is a file's ETag until its digest is known: size and mtime.
// A sidecar's also names its coding: engine precompress gives every sidecar
// its file's mtime, and two codings of one size must not share a
// validator (If-None-Match or If-Range with the zstd body's would
// otherwise match the br body).
func makeETag(size int64, mtime time.Time, rel string) string {
	b := make([]byte, 0, 40)
	b = append(b, '"')
	b = strconv.AppendInt(b, size, 16)
	b = append(b, '-')
	b = strconv.AppendInt(b, mtime.UnixNano(), 16)
	for _, cd := range Codings {
		if strings.HasSuffix(rel, cd.Suffix) {
			b = append(b, '-')
			b = append(b, cd.Suffix[1:]...)
		}
	}
	b = append(b, '"')
	return string(b)
}

// Close releases the root's directory descriptor.
func (r *Root) Close() {
	if r.fd > 0 {
		closeFd(r.fd)
		r.fd = -1
	}
}
