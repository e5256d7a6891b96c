package integrity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
)

// Named problems with files while a tree is hashed: reported, never
// skipped in silence.
var (
	ErrVanished = errors.New("integrity: vanished while hashing")
	ErrChanged  = errors.New("integrity: changed while hashing")
)

// FileError is one file that could not be hashed.
type FileError struct {
	Path string
	Err  error
}

func (e FileError) Error() string { return e.Path + ": " + e.Err.Error() }

// Progress is a snapshot of a tree being hashed.
type Progress struct {
	Files, TotalFiles int
	Bytes, TotalBytes int64
}

// TreeOptions tune HashTree. The zero value hashes every regular file
// with one worker per CPU.
type TreeOptions struct {
	Workers  int
	Skip     func(rel string) bool // leave a file out (the manifest being written)
	Progress func(Progress)        // called after each file, from any worker
	// beforeHash lets tests change the tree mid-run.
	beforeHash func(rel string)
}

// HashTree hashes every regular file below root in parallel and returns
// the entries sorted by path, with the files that could not be hashed.
// Symbolic links and other non-regular files are not followed.
func HashTree(root string, o TreeOptions) ([]Entry, []FileError, error) {
	type job struct {
		rel  string
		size int64
	}
	var jobs []job
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // reported below when its files cannot be opened
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if o.Skip != nil && o.Skip(rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			jobs = append(jobs, job{rel: rel, size: -1})
			return nil
		}
		jobs = append(jobs, job{rel: rel, size: info.Size()})
		total += info.Size()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	workers := o.Workers
	if workers <= 0 {
		workers = max(1, runtime.NumCPU())
	}
	var (
		mu      sync.Mutex  // guards entries and errs, appended to by every worker
		entries []Entry     // guarded by mu
		errs    []FileError // guarded by mu
		// Atomics, each on its own: next hands out jobs (each index to
		// one worker); done and bytes count for Progress.
		done  atomic.Int64
		bytes atomic.Int64
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				if o.beforeHash != nil {
					o.beforeHash(j.rel)
				}
				d, n, err := hashOne(filepath.Join(root, filepath.FromSlash(j.rel)))
				mu.Lock()
				if err != nil {
					errs = append(errs, FileError{Path: j.rel, Err: err})
				} else {
					entries = append(entries, Entry{Digest: d, Path: j.rel})
				}
				mu.Unlock()
				bytes.Add(n)
				if o.Progress != nil {
					o.Progress(Progress{Files: int(done.Add(1)), TotalFiles: len(jobs), Bytes: bytes.Load(), TotalBytes: total})
				}
			}
		}()
	}
	wg.Wait()
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	sort.Slice(errs, func(i, j int) bool { return errs[i].Path < errs[j].Path })
	return entries, errs, nil
}

// hashOne hashes a file and checks that it did not change meanwhile.
func hashOne(path string) (Digest, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Digest{}, 0, ErrVanished
	}
	if err != nil {
		return Digest{}, 0, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return Digest{}, 0, err
	}
	d, n, err := Sum(f)
	if err != nil {
		return Digest{}, n, err
	}
	after, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Digest{}, n, ErrVanished
	case err != nil:
		return Digest{}, n, err
	case n != before.Size() || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || !os.SameFile(before, after):
		return Digest{}, n, fmt.Errorf("%w (%d bytes read, size %d then %d)", ErrChanged, n, before.Size(), after.Size())
	}
	return d, n, nil
}
