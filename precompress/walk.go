package precompress

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/files"
)

// Temporaries are named ".precompress-*.tmp" in the sidecar's directory:
// dotfiles, so a walk does not take one for content, and the server never
// serves one (a partial sidecar), whatever hidden_files says.
const (
	tempPrefix = files.PrecompressTempPrefix
	tempSuffix = files.PrecompressTempSuffix
)

// file is a regular file found in the tree (through a symbolic link
// inside the tree, for some).
type file struct {
	path  string // root as given, joined with rel
	size  int64
	mtime time.Time
}

// tree is what a walk found.
type tree struct {
	sources  []file // compressible files
	sidecars []file // files named like sidecars of compressible names
	temps    []string
	files    int // regular files seen, sidecars included
	outside  int // symbolic links out of the tree or to hidden paths, skipped
	errs     []FileError
}

// scan walks root. Dotfiles and dot directories are skipped (leftover
// temporaries noted), directories reached by symbolic links are not
// entered, and a link to a file counts only when it stays in the tree
// and out of dot paths. An unreadable root is an error; anything else
// unreadable is recorded and the walk goes on.
func scan(root string) (*tree, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("precompress: %w", err)
	}
	if st, err := os.Stat(real); err != nil {
		return nil, fmt.Errorf("precompress: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("precompress: %s is not a directory", root)
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, fmt.Errorf("precompress: %w", err)
	}
	t := &tree{}
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(real, p)
		shown := filepath.Join(root, rel)
		if err != nil {
			if p == real {
				return err
			}
			t.errs = append(t.errs, FileError{Path: shown, Err: err})
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == real {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") {
			if d.Type().IsRegular() && strings.HasPrefix(name, tempPrefix) && strings.HasSuffix(name, tempSuffix) {
				t.temps = append(t.temps, shown)
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		var info fs.FileInfo
		switch {
		case d.IsDir():
			return nil
		case d.Type().IsRegular():
			if info, err = d.Info(); err != nil {
				t.errs = append(t.errs, FileError{Path: shown, Err: err})
				return nil
			}
		case d.Type()&fs.ModeSymlink != 0:
			info, err = os.Stat(p)
			if err != nil || !info.Mode().IsRegular() {
				return nil // dangling, or a directory (not followed), or a device
			}
			if !within(real, p) {
				t.outside++
				return nil
			}
		default:
			return nil // sockets, pipes, devices
		}
		t.files++
		f := file{path: shown, size: info.Size(), mtime: info.ModTime()}
		if base, ok := files.SidecarOf(name); ok {
			if Compressible(base) {
				t.sidecars = append(t.sidecars, f)
			}
			return nil
		}
		if Compressible(name) {
			t.sources = append(t.sources, f)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("precompress: %w", err)
	}
	return t, nil
}

// within reports whether the link p resolves to a path beneath root
// (resolved) that passes through no dotfile or dot directory: what the
// server would not serve must not be served compressed beside the link.
func within(root, p string) bool {
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(root, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false
	}
	for _, seg := range strings.Split(filepath.ToSlash(rel), "/") {
		if strings.HasPrefix(seg, ".") {
			return false
		}
	}
	return true
}

// notFound tells a missing file from other failures.
func notFound(err error) bool { return errors.Is(err, fs.ErrNotExist) }
