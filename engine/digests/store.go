package digests

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	// trees is the directory of outboard trees, served as a root of its
	// own (files.Config.Outboards); nil when trees are off. treesTemp is
	// set when it is a temporary directory, removed by Close.
	trees     *files.Root
	treesTemp bool
	refuse    bool // on_mismatch = "refuse"
	sha       bool // digests has "sha-256": computed in the same read
	// closing is set by Close: a file being hashed stops at its next
	// read, so a stop does not wait for the rest of a 100 GB file.
	closing atomic.Bool
	log     *slog.Logger
	jobs    chan func()
	wg      sync.WaitGroup

	mu       sync.Mutex                    // guards inflight, treeFailed and each job's waiters
	inflight map[integrity.FileID]*hashJob // guarded by mu: hashing queued or running
	// treeFailed holds when writing a file's tree last failed, so that
	// requests for a tree that cannot be written (a full disk) do not
	// each read the whole file again.
	treeFailed map[integrity.FileID]time.Time // guarded by mu

	// Counters for stats, each on its own: added to by the hashing
	// workers and the loops, read by any goroutine.
	Files, Bytes, Nanos, Mismatches, Dropped, Joined, TreesWritten atomic.Int64
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
		refuse: ic.OnMismatch == "refuse", sha: slices.Contains(ic.Digests, "sha-256"), log: log, jobs: make(chan func(), 4096),
		inflight: map[integrity.FileID]*hashJob{}, treeFailed: map[integrity.FileID]time.Time{}}
	if d.path == "off" {
		d.path = ""
	}
	if d.path != "" && ic.StateDir != "off" && filepath.Dir(d.path) == ic.StateDir {
		if err := os.MkdirAll(ic.StateDir, 0o750); err != nil {
			log.Warn("cannot create the state directory: digests are not kept across restarts", "dir", ic.StateDir, "err", err)
			d.path = ""
		}
	}
	if d.path != "" {
		if err := d.cache.Load(d.path); err != nil {
			log.Warn("digest cache unreadable; starting empty", "file", d.path, "err", err)
		} else if n := d.cache.Len(); n > 0 {
			log.Info("digest cache loaded", "file", d.path, "digests", n)
		}
	}
	// After the cache: the trees it still names are kept.
	if ic.Outboard == nil || *ic.Outboard {
		if err := d.openTrees(ic.StateDir); err != nil {
			return nil, err
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

// sums are a content's digests: BLAKE3 always, SHA-256 when [integrity]
// digests asks for it.
type sums struct {
	b3  integrity.Digest
	sha *integrity.SHA256
}

func info(s sums, corrupt bool) *files.Digest {
	dg := &files.Digest{Sum: s.b3, ETag: s.b3.ETag(), Header: s.b3.HeaderValue(), HeaderB3: s.b3.HeaderValue(), Corrupt: corrupt}
	if s.sha != nil {
		dg.SHA256 = (*[32]byte)(s.sha)
		dg.HeaderSHA = s.sha.HeaderValue()
		dg.Header += ", " + dg.HeaderSHA
	}
	return dg
}

// lookup returns the digests the cache knows for id: all those asked for,
// or none.
func (d *Store) lookup(id integrity.FileID) (sums, bool) {
	b3, ok := d.cache.Get(id)
	if !ok {
		return sums{}, false
	}
	s := sums{b3: b3}
	if d.sha {
		sha, ok := d.cache.GetSHA256(id)
		if !ok {
			return sums{}, false // hashed before SHA-256 was asked for
		}
		s.sha = &sha
	}
	return s, true
}

func identity(e *files.Entry) integrity.FileID {
	dev, ino, size, mt, ct := e.Identity()
	return integrity.FileID{Dev: dev, Ino: ino, Size: size, MtimeNs: mt, CtimeNs: ct}
}

// Known is files.Config.KnownDigest: a digest from the cache, or from the
// manifest when the file was not modified after the manifest was written
// (and no SHA-256 is asked for, which a b3sum manifest does not give).
func (d *Store) Known(root *files.Root, e *files.Entry) *files.Digest {
	if s, ok := d.lookup(identity(e)); ok {
		return d.judge(root, e, s)
	}
	if m := d.manifests[root]; m != nil && !d.sha {
		if sum, ok := m.sums[e.Rel()]; ok && e.ModTime.UnixNano() <= m.mtimeNs {
			return info(sums{b3: sum}, false)
		}
	}
	return nil
}

// judge turns the digest of e's content into what the file layer serves
// with: marked corrupt when it contradicts the site's manifest and the
// policy is to refuse, however the digest was learned (hashed now, or
// from the cache after the entry was evicted and opened again).
func (d *Store) judge(root *files.Root, e *files.Entry, s sums) *files.Digest {
	want, _, listed := d.listed(root, e)
	return info(s, d.refuse && listed && want != s.b3)
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
	// tree: the digest is known but the tree must be written: hash even
	// if the cache knows the digest. Guarded by Store.mu.
	tree bool
}

type waiter struct {
	root *files.Root
	e    *files.Entry
}

// Needs queues the work a response asked for: hashing a file whose
// digest is not known (NeedDigest), or writing a tree that is missing
// (NeedTree). site is the root of the site that answered.
func (d *Store) Needs(site *files.Root, r *files.Response) {
	if r.NeedDigest != nil {
		root := site
		if r.DigestRoot != nil {
			root = r.DigestRoot
		}
		d.Request(root, r.NeedDigest)
	}
	if r.NeedTree != nil {
		d.requestTree(site, r.NeedTree)
	}
}

// Request queues hashing e unless its digest is known or its content is
// already being hashed. It never blocks.
func (d *Store) Request(root *files.Root, e *files.Entry) {
	if e.Digest() != nil {
		return
	}
	id := identity(e)
	if s, ok := d.lookup(id); ok {
		e.SetDigest(d.judge(root, e, s))
		return
	}
	d.queue(root, e, id, false)
}

// requestTree queues hashing e again, its digest known, to write its
// missing outboard tree; not within a minute of failing to.
func (d *Store) requestTree(root *files.Root, e *files.Entry) {
	if d.trees == nil || root == d.trees {
		return
	}
	id := identity(e)
	d.mu.Lock()
	failed, ok := d.treeFailed[id]
	d.mu.Unlock()
	if ok && time.Since(failed) < time.Minute {
		return
	}
	d.queue(root, e, id, true)
}

// queue starts a hashing job for e, or joins the one hashing its content.
func (d *Store) queue(root *files.Root, e *files.Entry, id integrity.FileID, tree bool) {
	d.mu.Lock()
	if j := d.inflight[id]; j != nil {
		j.tree = j.tree || tree
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
	j := &hashJob{waiters: []waiter{{root, e}}, tree: tree}
	d.inflight[id] = j
	d.mu.Unlock()
	select {
	case d.jobs <- func() { d.run(id, j) }:
	default:
		// A full queue: the next request for the file asks again.
		d.Dropped.Add(1)
		d.finish(id, j, sums{}, false)
	}
}

// run hashes the content of job j from its first entry's descriptor.
func (d *Store) run(id integrity.FileID, j *hashJob) {
	d.mu.Lock()
	first, tree := j.waiters[0], j.tree
	d.mu.Unlock()
	s, ok := d.hash(first.root, first.e, id, tree)
	d.finish(id, j, s, ok)
}

// finish ends job j: every waiting entry gets the digest (when ok) and
// its reference back.
func (d *Store) finish(id integrity.FileID, j *hashJob, s sums, ok bool) {
	d.mu.Lock()
	delete(d.inflight, id)
	ws := j.waiters
	j.waiters = nil
	d.mu.Unlock()
	sum := s.b3
	if ok {
		d.cache.Put(id, sum)
		if s.sha != nil {
			d.cache.PutSHA256(id, *s.sha)
		}
	}
	for _, w := range ws {
		if ok {
			// The entry is judged before the mismatch is counted and
			// logged: whoever sees the count or the line finds the file
			// already refused.
			w.e.SetDigest(d.judge(w.root, w.e, s))
			if want, m, listed := d.listed(w.root, w.e); listed && want != sum {
				d.Mismatches.Add(1)
				d.log.Error("FILE DOES NOT MATCH THE MANIFEST", "path", w.e.Rel(), "manifest", m.path,
					"manifest_blake3", want.String(), "disk_blake3", sum.String(), "policy", map[bool]string{true: "refuse (500)", false: "serve the disk's bytes with their true digest"}[d.refuse])
			}
		}
		w.e.Release()
	}
}

// hash computes the digest of e's content from its open descriptor, and
// with it, in the same read, its outboard tree (kept for a file of more
// than one group beneath a site's root). It reports false when the file
// changed meanwhile (the digest would belong to no version of it).
// tree asks for the tree even when the digest is known.
func (d *Store) hash(root *files.Root, e *files.Entry, id integrity.FileID, tree bool) (sums, bool) {
	if s, ok := d.lookup(id); ok && !tree {
		return s, true // learned since the job was queued
	}
	if root == d.trees && d.trees != nil && !d.soundTree(e) {
		return sums{}, false
	}
	var out *treeFile
	if d.trees != nil && root != d.trees && id.Size > integrity.GroupSize {
		f, err := os.CreateTemp(d.trees.Dir, ".tmp-*")
		if err != nil {
			d.treeFailure(id, e, err)
		} else {
			out = &treeFile{f: f}
			defer func() {
				f.Close()
				os.Remove(f.Name()) // gone already when kept
			}()
		}
	}
	start := time.Now()
	r := stoppable{fileio.ReaderAt(e.Fd()), &d.closing}
	var sum integrity.Digest
	var err error
	var sha hash.Hash
	pass := func(w io.WriterAt) {
		var tee io.Writer
		if d.sha {
			sha = sha256.New()
			tee = sha
		}
		sum, err = integrity.SumOutboardTee(r, id.Size, w, tee)
	}
	if out != nil {
		pass(out)
		if out.err != nil {
			// The tree could not be written (a full disk): the digest
			// still can be.
			d.treeFailure(id, e, out.err)
			out = nil
		}
	}
	if out == nil {
		pass(discard{})
	}
	d.Nanos.Add(int64(time.Since(start)))
	if err != nil {
		d.log.Debug("not hashed: file changed while hashing", "path", e.Rel(), "err", err)
		return sums{}, false
	}
	d.Files.Add(1)
	d.Bytes.Add(id.Size)
	if now, err := fdIdentity(e.Fd()); err != nil || now != id {
		d.log.Debug("not hashed: file changed while hashing", "path", e.Rel())
		return sums{}, false
	}
	if out != nil {
		if err := d.keepTree(out.f, sum); err != nil {
			d.treeFailure(id, e, err)
		}
	}
	s := sums{b3: sum}
	if sha != nil {
		var v integrity.SHA256
		sha.Sum(v[:0])
		s.sha = &v
	}
	return s, true
}

// soundTree checks a tree whose own digest the cache does not know (it
// was changed after it was written, or the cache forgot it) against the
// root its name gives, before it is served again; a tree that does not
// hash to it is removed, and written again when next asked for.
func (d *Store) soundTree(e *files.Entry) bool {
	root, err := integrity.ParseHex(strings.TrimSuffix(e.Rel(), files.OutboardSuffix))
	if err == nil {
		b := make([]byte, e.Size)
		if _, err = fileio.ReaderAt(e.Fd()).ReadAt(b, 0); err == nil {
			_, err = integrity.ParseOutboard(b, root, -1)
		}
	}
	if err != nil {
		d.log.Warn("outboard tree damaged; removed, to be written again", "tree", e.Rel(), "err", err)
		os.Remove(filepath.Join(d.trees.Dir, e.Rel()))
		return false
	}
	return true
}

// treeFile is a tree being written, with the first write error.
type treeFile struct {
	f   *os.File
	err error
}

func (t *treeFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := t.f.WriteAt(p, off)
	if err != nil && t.err == nil {
		t.err = err
	}
	return n, err
}

// discard takes a tree that is not kept (a file of one group: its tree
// is its size alone).
type discard struct{}

func (discard) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

func (d *Store) treeFailure(id integrity.FileID, e *files.Entry, err error) {
	d.mu.Lock()
	d.treeFailed[id] = time.Now()
	d.mu.Unlock()
	d.log.Warn("cannot write a file's outboard tree; its .obao answers 503 and is tried again in a minute", "path", e.Rel(), "dir", d.trees.Dir, "err", err)
}

// openTrees opens (creating it when missing) the directory of outboard
// trees below stateDir, or a temporary one when stateDir is "off" or
// unusable, and clears what a crash left half written.
func (d *Store) openTrees(stateDir string) error {
	dir := ""
	if stateDir != "off" {
		dir = filepath.Join(stateDir, "outboard")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			d.log.Warn("cannot create the directory of outboard trees; they go to a temporary one and are written again after a restart", "dir", dir, "err", err)
			dir = ""
		}
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "engine-outboard-*")
		if err != nil {
			return fmt.Errorf("engine: a directory for outboard trees: %w", err)
		}
		dir, d.treesTemp = tmp, true
	}
	root, err := files.NewRoot(dir, false)
	if err != nil {
		return fmt.Errorf("engine: outboard trees: %w", err)
	}
	d.trees = root
	d.collectTrees(0)
	return nil
}

// Trees is the directory of outboard trees, for files.Config.Outboards;
// nil when they are off.
func (d *Store) Trees() *files.Root { return d.trees }

// keepTree makes the tree written to f the tree of the file whose digest
// is sum: flushed to disk, then renamed into place (a crash leaves a
// temporary file or the whole tree, never a cut one under the final
// name), and its own digest put in the cache for its responses.
func (d *Store) keepTree(f *os.File, sum integrity.Digest) error {
	if err := f.Sync(); err != nil {
		return err
	}
	final := filepath.Join(d.trees.Dir, files.OutboardName(sum))
	if err := os.Rename(f.Name(), final); err != nil {
		return err
	}
	d.TreesWritten.Add(1)
	sha := sha256.New()
	own, n, err := integrity.Sum(io.TeeReader(io.NewSectionReader(f, 0, 1<<62), sha))
	if err != nil {
		return nil // served all the same; hashed when first asked for
	}
	if id, err := fdIdentity(int(f.Fd())); err == nil && id.Size == n {
		d.cache.Put(id, own)
		var v integrity.SHA256
		sha.Sum(v[:0])
		d.cache.PutSHA256(id, v)
	}
	return nil
}

// treeGrace is how long a tree no digest in the cache names is kept
// (a tree is written before its file's digest is put in the cache), and a
// temporary file left by a crash.
const treeGrace = 10 * time.Minute

// collectTrees removes trees of contents the cache no longer knows, and
// temporary files older than grace: trees live as long as their digest.
func (d *Store) collectTrees(grace time.Duration) {
	ents, err := os.ReadDir(d.trees.Dir)
	if err != nil || len(ents) == 0 {
		return
	}
	var live map[integrity.Digest]bool
	now := time.Now()
	for _, de := range ents {
		name := de.Name()
		info, err := de.Info()
		if err != nil || now.Sub(info.ModTime()) < grace {
			continue
		}
		if hexSum, ok := strings.CutSuffix(name, files.OutboardSuffix); ok && !strings.HasPrefix(name, ".") {
			if live == nil {
				live = d.cache.Digests()
			}
			if sum, err := integrity.ParseHex(hexSum); err == nil && live[sum] {
				continue
			}
		} else if !strings.HasPrefix(name, ".tmp-") {
			continue // not ours
		}
		os.Remove(filepath.Join(d.trees.Dir, name))
	}
}

// SaveLoop persists the cache now and then, until stop closes.
// Trees no longer needed are removed every ten minutes.
func (d *Store) SaveLoop(stop <-chan struct{}) {
	if d.path == "" && d.trees == nil {
		return
	}
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if d.path != "" {
			if err := d.cache.Save(d.path); err != nil {
				d.log.Warn("cannot save the digest cache", "file", d.path, "err", err)
			}
		}
		if d.trees != nil && i%10 == 0 {
			d.collectTrees(treeGrace)
		}
	}
}

// Close stops hashing and saves the cache; trees in a temporary
// directory go with it.
func (d *Store) Close() {
	d.closing.Store(true)
	close(d.jobs)
	d.wg.Wait()
	if d.path != "" {
		if err := d.cache.Save(d.path); err != nil {
			d.log.Warn("cannot save the digest cache", "file", d.path, "err", err)
		}
	}
	if d.trees != nil && d.treesTemp {
		os.RemoveAll(d.trees.Dir)
	}
}

// stoppable is a file's reader that fails once the store closes.
type stoppable struct {
	r    io.ReaderAt
	stop *atomic.Bool
}

var errClosing = errors.New("digests: the server is stopping")

func (s stoppable) ReadAt(p []byte, off int64) (int, error) {
	if s.stop.Load() {
		return 0, errClosing
	}
	return s.r.ReadAt(p, off)
}

// WantsSHA256 reports whether files are served with their SHA-256 too
// (integrity.digests).
func (d *Store) WantsSHA256() bool { return d.sha }

// Learn records the digests of the file at path, hashed by the caller as
// it wrote the bytes (an edge cache object): the file is served with
// them at once, never read again to learn them. sha may be nil; it is
// needed when WantsSHA256.
func (d *Store) Learn(path string, b3 integrity.Digest, sha *integrity.SHA256) error {
	if d.sha && sha == nil {
		return errors.New("digests: a SHA-256 is needed too")
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	id, err := fdIdentity(int(f.Fd()))
	if err != nil {
		return err
	}
	d.cache.Put(id, b3)
	if sha != nil {
		d.cache.PutSHA256(id, *sha)
	}
	return nil
}

// Cache is the digest cache, for its counts.
func (d *Store) Cache() *integrity.Cache { return d.cache }

// Backlog is the number of files waiting to be hashed.
func (d *Store) Backlog() int { return len(d.jobs) }
