package files

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	errNotDir      = unix.ENOTDIR
	errNameTooLong = unix.ENAMETOOLONG
	errLoop        = unix.ELOOP
	errEscapes     = errors.New("files: path leaves the root")
)

func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

func closeFd(fd int) { unix.Close(fd) }

// fdPath returns the path the kernel resolved for an open descriptor, or
// "" when it cannot tell.
func fdPath(fd int) string {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return ""
	}
	return p
}

// resolvesHidden reports whether the descriptor of rel resolved, through
// symbolic links, to a dotfile or into a dot directory beneath the root:
// a link "public/env -> ../.env" must not serve what hidden_files denies.
func resolvesHidden(r *Root, fd int) bool {
	p := fdPath(fd)
	if r.real == "" || p == "" {
		return false
	}
	rest, ok := strings.CutPrefix(p, r.real+"/")
	return ok && hidden([]byte(rest))
}

// openBeneath opens rel relative to the root. Without FollowOutside the
// kernel enforces that no component (symlinks included) resolves outside
// the root: openat2(2) with RESOLVE_BENEATH, Linux 5.6 (commit fddb5d430ad9).
func openBeneath(r *Root, rel string) (int, error) {
	name := rel
	if name == "" {
		name = "."
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if !r.FollowOutside {
		how.Resolve |= unix.RESOLVE_BENEATH
	}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(r.fd, name, &how)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN && tries < 16:
			// RESOLVE_BENEATH saw a rename race (a "current" symlink
			// swapped by a deploy) and asks to be retried (openat2(2)).
			continue
		case err == unix.EXDEV:
			return -1, errEscapes
		case err == unix.ENOSYS:
			return openBeneathFallback(r, name, flags)
		}
		return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
}

// openBeneathFallback is for kernels before openat2: open, then check where
// the descriptor really points.
func openBeneathFallback(r *Root, name string, flags int) (int, error) {
	fd, err := unix.Openat(r.fd, name, flags, 0)
	if err != nil {
		return -1, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	if r.FollowOutside {
		return fd, nil
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || (real != r.Dir && !bytes.HasPrefix([]byte(real), []byte(r.Dir+"/"))) {
		unix.Close(fd)
		return -1, errEscapes
	}
	return fd, nil
}

// openEntry opens rel and describes it.
func openEntry(r *Root, rel string, small int64) *Entry {
	e := &Entry{fd: -1}
	fd, err := openBeneath(r, rel)
	if err != nil {
		e.Kind, e.Err = classify(err), err
		return e
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		e.Kind, e.Err = KindError, os.NewSyscallError("fstat", err)
		return e
	}
	e.dev, e.ino, e.ctimeNs, e.nlink = st.Dev, st.Ino, st.Ctim.Nano(), uint64(st.Nlink)
	e.ModTime = time.Unix(st.Mtim.Unix())
	e.viaHidden = resolvesHidden(r, fd)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		unix.Close(fd)
		e.Kind = KindDir
		return e
	case unix.S_IFREG:
	default:
		unix.Close(fd)
		e.Kind, e.Err = KindForbidden, fmt.Errorf("files: %q is not a regular file", rel)
		return e
	}
	e.Kind, e.fd, e.Size = KindFile, fd, st.Size
	e.ETag = makeETag(st.Size, e.ModTime, rel)
	e.LastModified = httpDate(e.ModTime)
	e.ContentType = ContentType(rel)
	if st.Size > 0 && st.Size <= small {
		buf := make([]byte, st.Size)
		n, err := unix.Pread(fd, buf, 0)
		if err == nil && n == len(buf) {
			e.Small = buf
		}
	}
	return e
}

// stillSame reports whether e still describes what is on disk.
func stillSame(e *Entry) bool {
	var st unix.Stat_t
	err := unix.Stat(e.abs, &st)
	switch e.Kind {
	case KindMissing:
		return err != nil
	case KindFile:
		return err == nil && st.Dev == e.dev && st.Ino == e.ino && st.Size == e.Size &&
			time.Unix(st.Mtim.Unix()).Equal(e.ModTime) && st.Ctim.Nano() == e.ctimeNs
	case KindDir:
		return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Ino == e.ino
	}
	return false // forbidden entries are retried now and then
}

// watcher turns inotify events on watched directories into invalidations.
type watcher struct {
	// Immutable after construction.
	f        *os.File // for reads through the runtime poller
	fd       int      // the same descriptor, for inotify_add_watch; never f.Fd(), which makes f blocking
	onChange func(dir, name string)
	onReset  func()

	mu     sync.Mutex         // guards closed, byDir and byWd: the cache adds and releases watches, the reader goroutine maps events
	closed bool               // guarded by mu
	byDir  map[string]*watch  // guarded by mu
	byWd   map[int32][]string // guarded by mu; one inode may be reached by several paths
}

type watch struct {
	wd   int32
	refs int
}

const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

func newWatcher(onChange func(dir, name string), onReset func()) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, onChange: onChange, onReset: onReset,
		byDir: map[string]*watch{}, byWd: map[int32][]string{}}
	go w.run()
	return w, nil
}

func (w *watcher) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return os.ErrClosed
	}
	if x := w.byDir[dir]; x != nil {
		x.refs++
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		return os.NewSyscallError("inotify_add_watch", err)
	}
	if old, ok := w.byWd[int32(wd)]; ok {
		// Same directory reached by another path (a symlink): share it.
		x := w.byDir[old[0]]
		x.refs++
		w.byDir[dir] = x
		w.byWd[int32(wd)] = append(old, dir)
		return nil
	}
	w.byDir[dir] = &watch{wd: int32(wd), refs: 1}
	w.byWd[int32(wd)] = []string{dir}
	return nil
}

func (w *watcher) release(dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.byDir[dir]
	if x == nil || w.closed {
		return
	}
	x.refs--
	if x.refs > 0 {
		return
	}
	for _, d := range w.byWd[x.wd] {
		delete(w.byDir, d)
	}
	delete(w.byWd, x.wd)
	unix.InotifyRmWatch(w.fd, uint32(x.wd))
}

func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.f.Close()
}

func (w *watcher) run() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if i := bytes.IndexByte(raw, 0); i >= 0 {
					raw = raw[:i]
				}
				name = string(raw)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				w.onReset()
				continue
			}
			w.mu.Lock()
			dirs := append([]string(nil), w.byWd[ev.Wd]...)
			w.mu.Unlock()
			whole := ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0
			for _, d := range dirs {
				if whole {
					w.onChange(d, "")
				} else {
					w.onChange(d, name)
				}
			}
		}
	}
}
