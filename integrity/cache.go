package integrity

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// FileID identifies the content of a file without reading it: a digest
// computed for one FileID holds as long as the file still has it. The
// change time is in it because nothing else is sure to change when bytes
// are rewritten in place: rsync --inplace -t and builds that normalise
// modification times keep the size and mtime, and a file replaced by
// another can get the old inode number back; the kernel sets the change
// time on every write and metadata change, and no program can set it.
type FileID struct {
	Dev, Ino uint64
	Size     int64
	MtimeNs  int64
	CtimeNs  int64
}

// Cache maps FileIDs to digests, bounded, safe for concurrent use.
type Cache struct {
	max int

	mu    sync.Mutex        // guards m, sha, order and dirty
	m     map[FileID]Digest // guarded by mu
	sha   map[FileID]SHA256 // guarded by mu; for the ids of m whose SHA-256 is known too
	order []FileID          // guarded by mu; insertion order, for eviction
	dirty bool              // guarded by mu

	// Hits and Misses count Get's answers.
	Hits, Misses atomic.Int64
}

// NewCache returns a cache holding at most max digests. Zero means 1,000,000
// (about 100 MiB).
func NewCache(max int) *Cache {
	if max <= 0 {
		max = 1_000_000
	}
	return &Cache{max: max, m: map[FileID]Digest{}, sha: map[FileID]SHA256{}}
}

// Get returns the digest of id, if known.
func (c *Cache) Get(id FileID) (Digest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[id]
	if ok {
		c.Hits.Add(1)
	} else {
		c.Misses.Add(1)
	}
	return d, ok
}

// GetSHA256 returns the SHA-256 of id, if known.
func (c *Cache) GetSHA256(id FileID) (SHA256, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sha[id]
	return s, ok
}

// PutSHA256 records the SHA-256 of id beside its digest (Put first).
func (c *Cache) PutSHA256(id FileID, s SHA256) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; ok {
		c.sha[id] = s
		c.dirty = true
	}
}

// Put records the digest of id, evicting the oldest entries past the bound.
func (c *Cache) Put(id FileID, d Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; !ok {
		c.order = append(c.order, id)
	}
	c.m[id] = d
	c.dirty = true
	for len(c.m) > c.max && len(c.order) > 0 {
		delete(c.sha, c.order[0])
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) > 2*c.max { // ids replaced by Put again: compact
		live := c.order[:0]
		for _, k := range c.order {
			if _, ok := c.m[k]; ok {
				live = append(live, k)
			}
		}
		c.order = live
	}
}

// Len returns the number of digests held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// cacheHeader opens a saved cache: its version and fields. A file without
// it was written by an engine that did not key digests by change time,
// and is not trusted.
const cacheHeader = "# engine digest cache 2: dev ino size mtime_ns ctime_ns blake3 sha256"

// ErrCacheVersion means a saved digest cache is of another version.
var ErrCacheVersion = errors.New("integrity: digest cache of another version (" + cacheHeader[2:] + " expected)")

// Save writes the cache to path (atomically: a temporary file renamed) if
// it changed since the last Save or Load: cacheHeader, then one line per
// digest, "dev ino size mtime_ns ctime_ns blake3 sha256" (hex; "-" for a
// SHA-256 not computed).
func (c *Cache) Save(path string) error {
	c.mu.Lock()
	if !c.dirty {
		c.mu.Unlock()
		return nil
	}
	lines := make([]string, 0, len(c.m))
	for _, id := range c.order {
		if d, ok := c.m[id]; ok {
			sha := "-"
			if s, ok := c.sha[id]; ok {
				sha = s.String()
			}
			lines = append(lines, fmt.Sprintf("%d %d %d %d %d %s %s\n", id.Dev, id.Ino, id.Size, id.MtimeNs, id.CtimeNs, d, sha))
		}
	}
	c.dirty = false
	c.mu.Unlock()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".digest-cache-*")
	if err != nil {
		return err
	}
	w := bufio.NewWriter(tmp)
	w.WriteString(cacheHeader + "\n")
	for _, l := range lines {
		w.WriteString(l)
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Digests returns the digests held, for finding what is no longer needed.
func (c *Cache) Digests() map[Digest]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[Digest]bool, len(c.m))
	for _, d := range c.m {
		out[d] = true
	}
	return out
}

// Load reads a file written by Save. A missing file is an empty cache;
// a malformed line, or a file of another version (ErrCacheVersion), is an
// error naming it.
func (c *Cache) Load(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return c.read(f, path)
}

func (c *Cache) read(r io.Reader, name string) error {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			if sc.Text() != cacheHeader {
				return fmt.Errorf("%s: %w", name, ErrCacheVersion)
			}
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) != 7 {
			return fmt.Errorf("integrity: %s:%d: expected dev ino size mtime_ns ctime_ns blake3 sha256", name, line)
		}
		var nums [5]int64
		for i := range nums {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return fmt.Errorf("integrity: %s:%d: %q is not a number", name, line, f[i])
			}
			nums[i] = v
		}
		d, err := ParseHex(f[5])
		if err != nil {
			return fmt.Errorf("integrity: %s:%d: %q is not 64 hex digits", name, line, f[5])
		}
		id := FileID{Dev: uint64(nums[0]), Ino: uint64(nums[1]), Size: nums[2], MtimeNs: nums[3], CtimeNs: nums[4]}
		c.Put(id, d)
		if f[6] != "-" {
			s, err := ParseSHA256Hex(f[6])
			if err != nil {
				return fmt.Errorf("integrity: %s:%d: %q is not a SHA-256 (64 hex digits) or -", name, line, f[6])
			}
			c.PutSHA256(id, s)
		}
	}
	c.mu.Lock()
	c.dirty = false
	c.mu.Unlock()
	return sc.Err()
}
