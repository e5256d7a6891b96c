//go:build !linux

package files

import (
	"errors"
	"fmt"
)

var (
	errNotDir      = errors.New("not a directory")
	errNameTooLong = errors.New("name too long")
	errLoop        = errors.New("too many levels of symbolic links")
	errEscapes     = errors.New("files: path leaves the root")
)

func openDir(dir string) (int, error) {
	return -1, fmt.Errorf("files: serving %s: %w", dir, errors.ErrUnsupported)
}

func closeFd(int) {}

func fdPath(int) string { return "" }

func openEntry(*Root, string, int64) *Entry {
	return &Entry{Kind: KindError, Err: errors.ErrUnsupported}
}

func stillSame(*Entry) bool { return false }

type watcher struct{}

func newWatcher(func(string, string), func()) (*watcher, error) { return nil, errors.ErrUnsupported }
func (*watcher) add(string) error                               { return errors.ErrUnsupported }
func (*watcher) release(string)                                 {}
func (*watcher) close()                                         {}

func openBeneath(*Root, string) (int, error) { return -1, errors.ErrUnsupported }
