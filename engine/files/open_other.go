//go:build !linux

package files

import (
	"errors"
	"fmt"
	"syscall"
)

// The errnos open_linux.go names, so classify reads the same everywhere.
var (
	errNotDir      error = syscall.ENOTDIR
	errNameTooLong error = syscall.ENAMETOOLONG
	errLoop        error = syscall.ELOOP
	errEscapes           = errors.New("files: path leaves the root")
)

var errNotLinux = fmt.Errorf("files: serving files needs Linux (openat2, inotify): %w", errors.ErrUnsupported)

func openDir(dir string) (int, error) {
	return -1, fmt.Errorf("files: serving %s: %w", dir, errors.ErrUnsupported)
}

func closeFd(int) {}

func fdPath(int) string { return "" }

func openEntry(*Root, string, int64) *Entry {
	return &Entry{Kind: KindError, Err: errNotLinux}
}

func stillSame(*Entry) bool { return false }

type watcher struct{}

func newWatcher(func(string, string), func()) (*watcher, error) { return nil, errNotLinux }
func (*watcher) add(string) error                               { return errNotLinux }
func (*watcher) release(string)                                 {}
func (*watcher) close()                                         {}

func openBeneath(*Root, string) (int, error) { return -1, errNotLinux }
