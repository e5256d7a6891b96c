package integrity

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
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
	// Outboard writes each file's outboard tree beside it, as FILE.obao
	// (OutboardSidecar), in the same read as its digest; files named
	// *.obao are then sidecars, never hashed themselves.
	Outboard bool
	// SHA256 computes each file's SHA-256 too (Entry.SHA256), in the same
	// read.
	SHA256 bool
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
		if o.Skip != nil && o.Skip(rel) || o.Outboard && strings.HasSuffix(rel, OutboardSidecar) {
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
				d, sha, n, err := hashOne(filepath.Join(root, filepath.FromSlash(j.rel)), o.Outboard, o.SHA256)
				mu.Lock()
				if err != nil {
					errs = append(errs, FileError{Path: j.rel, Err: err})
				} else {
					entries = append(entries, Entry{Digest: d, Path: j.rel, SHA256: sha})
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

// OutboardSidecar is added to a file's name to name its outboard tree
// beside it: what engine digest --outboard writes, and what a client
// looks for on a server that does not link the tree.
const OutboardSidecar = ".obao"

// hashOne hashes a file, with its tree written beside it when outboard is
// set and its SHA-256 when withSHA is, and checks that it did not change
// meanwhile (a tree written for bytes that changed is removed).
func hashOne(path string, outboard, withSHA bool) (Digest, *SHA256, int64, error) {
	var h hash.Hash
	var tee io.Writer
	if withSHA {
		h = sha256.New()
		tee = h
	}
	d, n, err := hashOneTee(path, outboard, tee)
	if err != nil || h == nil {
		return d, nil, n, err
	}
	var s SHA256
	h.Sum(s[:0])
	return d, &s, n, nil
}

func hashOneTee(path string, outboard bool, tee io.Writer) (Digest, int64, error) {
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
	n := before.Size()
	var tree *os.File
	var w io.WriterAt = discardAt{}
	if outboard {
		if tree, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+OutboardSidecar+".tmp-*"); err != nil {
			return Digest{}, 0, fmt.Errorf("outboard tree: %w", err)
		}
		defer func() {
			tree.Close()
			os.Remove(tree.Name()) // gone already when kept
		}()
		w = tree
	}
	d, err := SumOutboardTee(f, n, w, tee)
	if err != nil {
		return Digest{}, 0, err
	}
	after, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Digest{}, n, ErrVanished
	case err != nil:
		return Digest{}, n, err
	case after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || !os.SameFile(before, after) || changedSince(before, after):
		return Digest{}, n, fmt.Errorf("%w (size %d then %d)", ErrChanged, before.Size(), after.Size())
	}
	if tree != nil {
		if err := tree.Sync(); err != nil {
			return Digest{}, n, fmt.Errorf("outboard tree: %w", err)
		}
		if err := os.Rename(tree.Name(), path+OutboardSidecar); err != nil {
			return Digest{}, n, fmt.Errorf("outboard tree: %w", err)
		}
	}
	return d, n, nil
}

// discardAt takes a tree that is not kept.
type discardAt struct{}

func (discardAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
