package digests

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/fileio"
)

// Store knows the BLAKE3 digest of served files: from the digest cache
// (keyed by file identity, optionally persisted), from a manifest at the
// site root, or by hashing in the background. Serving never waits for it.
type Store struct {
	// Immutable after construction.
	cache     *integrity.Cache // Cache
	path      string           // persisted cache; "" when not persisted
	manifests map[*files.Root]*manifest
	refuse    bool // on_mismatch = "refuse"
	log       *slog.Logger
	jobs      chan func()
	wg        sync.WaitGroup

	mu       sync.Mutex                    // guards inflight and each job's waiters
	inflight map[integrity.FileID]*hashJob // guarded by mu: hashing queued or running

	// Counters for stats, each on its own: added to by the hashing
	// workers and the loops, read by any goroutine.
	Files, Bytes, Nanos, Mismatches, Dropped, Joined atomic.Int64
}

// manifest is a site's B3SUMS: trusted for files not modified after it.
type manifest struct {
	path    string
	mtimeNs int64
	sums    map[string]integrity.Digest
}

// New loads the digest cache (integrity.cache) and each root's manifest
// (integrity.manifest), and starts integrity.workers hashing workers.
func New(cfg *config.Config, roots []*files.Root, log *slog.Logger) (*Store, error) {
	ic := &cfg.Integrity
	d := &Store{cache: integrity.NewCache(0), path: ic.Cache, manifests: map[*files.Root]*manifest{},
		refuse: ic.OnMismatch == "refuse", log: log, jobs: make(chan func(), 4096),
		inflight: map[integrity.FileID]*hashJob{}}
	if d.path != "" {
		if err := d.cache.Load(d.path); err != nil {
			log.Warn("digest cache unreadable; starting empty", "file", d.path, "err", err)
		} else if n := d.cache.Len(); n > 0 {
			log.Info("digest cache loaded", "file", d.path, "digests", n)
		}
	}
	if ic.Manifest != "off" {
		for _, r := range roots {
			m, err := loadManifest(filepath.Join(r.Dir, ic.Manifest))
			if err != nil {
				return nil, err
			}
			if m != nil {
				d.manifests[r] = m
				log.Info("manifest loaded", "file", m.path, "files", len(m.sums))
			}
		}
	}
	for i := 0; i < ic.Workers; i++ {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for job := range d.jobs {
				job()
			}
		}()
	}
	return d, nil
}

// loadManifest reads a manifest if there is one. A malformed manifest is a
// configuration error: serving against a broken one would be worse.
func loadManifest(path string) (*manifest, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: manifest %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	entries, err := integrity.ReadManifest(f)
	if err != nil {
		return nil, fmt.Errorf("engine: manifest %s: %w", path, err)
	}
	m := &manifest{path: path, mtimeNs: st.ModTime().UnixNano(), sums: make(map[string]integrity.Digest, len(entries))}
	for _, e := range entries {
		m.sums[e.Path] = e.Digest
	}
	return m, nil
}

func info(sum integrity.Digest, corrupt bool) *files.Digest {
	return &files.Digest{Sum: sum, ETag: sum.ETag(), Header: sum.HeaderValue(), Corrupt: corrupt}
}

func identity(e *files.Entry) integrity.FileID {
	dev, ino, size, mt := e.Identity()
	return integrity.FileID{Dev: dev, Ino: ino, Size: size, MtimeNs: mt}
}

// Known is files.Config.KnownDigest: a digest from the cache, or from the
// manifest when the file was not modified after the manifest was written.
func (d *Store) Known(root *files.Root, e *files.Entry) *files.Digest {
	if sum, ok := d.cache.Get(identity(e)); ok {
		return d.judge(root, e, sum)
	}
	if m := d.manifests[root]; m != nil {
		if sum, ok := m.sums[e.Rel()]; ok && e.ModTime.UnixNano() <= m.mtimeNs {
			return info(sum, false)
		}
	}
	return nil
}

// judge turns the digest of e's content into what the file layer serves
// with: marked corrupt when it contradicts the site's manifest and the
// policy is to refuse, however the digest was learned (hashed now, or
// from the cache after the entry was evicted and opened again).
func (d *Store) judge(root *files.Root, e *files.Entry, sum integrity.Digest) *files.Digest {
	want, _, listed := d.listed(root, e)
	return info(sum, d.refuse && listed && want != sum)
}

// listed returns the digest the site's manifest gives for e, and the
// manifest, when it lists e.
func (d *Store) listed(root *files.Root, e *files.Entry) (integrity.Digest, *manifest, bool) {
	if m := d.manifests[root]; m != nil {
		if want, ok := m.sums[e.Rel()]; ok {
			return want, m, true
		}
	}
	return integrity.Digest{}, nil, false
}

// hashJob is the hashing of one file content (device, inode, size, mtime)
// and the entries waiting for its digest: the same file opened again after
// its cache entry was evicted, or under another site's root, joins the job
// instead of reading the file a second time.
type hashJob struct {
	waiters []waiter // guarded by Store.mu
}

type waiter struct {
	root *files.Root
	e    *files.Entry
}

// Request queues hashing e unless its digest is known or its content is
// already being hashed. It never blocks.
func (d *Store) Request(root *files.Root, e *files.Entry) {
	if e.Digest() != nil {
		return
	}
	id := identity(e)
	if sum, ok := d.cache.Get(id); ok {
		e.SetDigest(d.judge(root, e, sum))
		return
	}
	d.mu.Lock()
	if j := d.inflight[id]; j != nil {
		for _, w := range j.waiters {
			if w.e == e {
				d.mu.Unlock()
				return
			}
		}
		e.Ref()
		j.waiters = append(j.waiters, waiter{root, e})
		d.Joined.Add(1)
		d.mu.Unlock()
		return
	}
	e.Ref()
	j := &hashJob{waiters: []waiter{{root, e}}}
	d.inflight[id] = j
	d.mu.Unlock()
	select {
	case d.jobs <- func() { d.run(id, j) }:
	default:
		// A full queue: the next request for the file asks again.
		d.Dropped.Add(1)
		d.finish(id, j, integrity.Digest{}, false)
	}
}

// run hashes the content of job j from its first entry's descriptor.
func (d *Store) run(id integrity.FileID, j *hashJob) {
	d.mu.Lock()
	first := j.waiters[0]
	d.mu.Unlock()
	sum, ok := d.hash(first.e, id)
	d.finish(id, j, sum, ok)
}

// finish ends job j: every waiting entry gets the digest (when ok) and
// its reference back.
func (d *Store) finish(id integrity.FileID, j *hashJob, sum integrity.Digest, ok bool) {
	d.mu.Lock()
	delete(d.inflight, id)
	ws := j.waiters
	j.waiters = nil
	d.mu.Unlock()
	if ok {
		d.cache.Put(id, sum)
	}
	for _, w := range ws {
		if ok {
			if want, m, listed := d.listed(w.root, w.e); listed && want != sum {
				d.Mismatches.Add(1)
				d.log.Error("FILE DOES NOT MATCH THE MANIFEST", "path", w.e.Rel(), "manifest", m.path,
					"manifest_blake3", want.String(), "disk_blake3", sum.String(), "policy", map[bool]string{true: "refuse (500)", false: "serve the disk's bytes with their true digest"}[d.refuse])
			}
			w.e.SetDigest(d.judge(w.root, w.e, sum))
		}
		w.e.Release()
	}
}

// hash computes the digest of e's content from its open descriptor. It
// reports false when the file changed meanwhile (the digest would belong
// to no version of it).
func (d *Store) hash(e *files.Entry, id integrity.FileID) (integrity.Digest, bool) {
	if sum, ok := d.cache.Get(id); ok {
		return sum, true // learned since the job was queued
	}
	start := time.Now()
	sum, err := integrity.SumRange(fileio.ReaderAt(e.Fd()), 0, id.Size)
	d.Nanos.Add(int64(time.Since(start)))
	if err != nil {
		d.log.Debug("not hashed: file changed while hashing", "path", e.Rel(), "err", err)
		return sum, false
	}
	d.Files.Add(1)
	d.Bytes.Add(id.Size)
	if now, err := fdIdentity(e.Fd()); err != nil || now != id {
		d.log.Debug("not hashed: file changed while hashing", "path", e.Rel())
		return sum, false
	}
	return sum, true
}

// SaveLoop persists the cache now and then, until stop closes.
func (d *Store) SaveLoop(stop <-chan struct{}) {
	if d.path == "" {
		return
	}
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := d.cache.Save(d.path); err != nil {
				d.log.Warn("cannot save the digest cache", "file", d.path, "err", err)
			}
		}
	}
}

// Close stops hashing and saves the cache.
func (d *Store) Close() {
	close(d.jobs)
	d.wg.Wait()
	if d.path != "" {
		if err := d.cache.Save(d.path); err != nil {
			d.log.Warn("cannot save the digest cache", "file", d.path, "err", err)
		}
	}
}

// Cache is the digest cache, for its counts.
func (d *Store) Cache() *integrity.Cache { return d.cache }

// Backlog is the number of files waiting to be hashed.
func (d *Store) Backlog() int { return len(d.jobs) }
