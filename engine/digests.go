package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/integrity"
)

// digests knows the BLAKE3 digest of served files: from the digest cache
// (keyed by file identity, optionally persisted), from a manifest at the
// site root, or by hashing in the background. Serving never waits for it.
type digests struct {
	// Immutable after construction.
	cache     *integrity.Cache
	path      string // persisted cache; "" when not persisted
	manifests map[*files.Root]*manifest
	refuse    bool // on_mismatch = "refuse"
	log       *slog.Logger
	jobs      chan func()
	wg        sync.WaitGroup

	inflight sync.Map // *files.Entry -> struct{}: hashing queued or running

	files, bytes, nanos, mismatches, dropped atomic.Int64
}

// manifest is a site's B3SUMS: trusted for files not modified after it.
type manifest struct {
	path    string
	mtimeNs int64
	sums    map[string]integrity.Digest
}

func newDigests(cfg *Config, roots []*files.Root, log *slog.Logger) (*digests, error) {
	ic := &cfg.Integrity
	d := &digests{cache: integrity.NewCache(0), path: ic.Cache, manifests: map[*files.Root]*manifest{},
		refuse: ic.OnMismatch == "refuse", log: log, jobs: make(chan func(), 4096)}
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
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	entries, err := integrity.ReadManifest(f)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
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

// known is files.Config.KnownDigest: a digest from the cache, or from the
// manifest when the file was not modified after the manifest was written.
func (d *digests) known(root *files.Root, e *files.Entry) *files.Digest {
	if sum, ok := d.cache.Get(identity(e)); ok {
		return info(sum, false)
	}
	if m := d.manifests[root]; m != nil {
		if sum, ok := m.sums[e.Rel()]; ok && e.ModTime.UnixNano() <= m.mtimeNs {
			return info(sum, false)
		}
	}
	return nil
}

// request queues hashing e unless it is already queued. It never blocks.
func (d *digests) request(root *files.Root, e *files.Entry) {
	if _, busy := d.inflight.LoadOrStore(e, struct{}{}); busy {
		return
	}
	e.Ref()
	job := func() {
		defer e.Release()
		defer d.inflight.Delete(e)
		d.hash(root, e)
	}
	select {
	case d.jobs <- job:
	default:
		// A full queue: the next request for the file asks again.
		d.dropped.Add(1)
		e.Release()
		d.inflight.Delete(e)
	}
}

// hash computes e's digest from its open descriptor and records it,
// unless the file changed meanwhile.
func (d *digests) hash(root *files.Root, e *files.Entry) {
	if e.Digest() != nil {
		return
	}
	id := identity(e)
	start := time.Now()
	sum, err := integrity.SumRange(fdReaderAt(e.Fd()), 0, id.Size)
	d.nanos.Add(int64(time.Since(start)))
	if err != nil {
		d.log.Debug("not hashed: file changed while hashing", "path", e.Rel(), "err", err)
		return
	}
	d.files.Add(1)
	d.bytes.Add(id.Size)
	if now, err := fdIdentity(e.Fd()); err != nil || now != id {
		d.log.Debug("not hashed: file changed while hashing", "path", e.Rel())
		return
	}
	d.cache.Put(id, sum)
	if m := d.manifests[root]; m != nil {
		if want, ok := m.sums[e.Rel()]; ok && want != sum {
			d.mismatches.Add(1)
			d.log.Error("FILE DOES NOT MATCH THE MANIFEST", "path", e.Rel(), "manifest", m.path,
				"manifest_blake3", want.String(), "disk_blake3", sum.String(), "policy", map[bool]string{true: "refuse (500)", false: "serve the disk's bytes with their true digest"}[d.refuse])
			e.SetDigest(info(sum, d.refuse))
			return
		}
	}
	e.SetDigest(info(sum, false))
}

// saveLoop persists the cache now and then, until stop closes.
func (d *digests) saveLoop(stop <-chan struct{}) {
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

// close stops hashing and saves the cache.
func (d *digests) close() {
	close(d.jobs)
	d.wg.Wait()
	if d.path != "" {
		if err := d.cache.Save(d.path); err != nil {
			d.log.Warn("cannot save the digest cache", "file", d.path, "err", err)
		}
	}
}
