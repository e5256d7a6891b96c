package engine

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// sendFile sends n bytes of file from off into the socket by sendfile(2),
// waiting (in Go's poller) while the socket is full. The file is a fill's:
// its bytes are those that landed, never past what the caller read of
// Written.
func (c *countedConn) sendFile(file *os.File, off, n int64) (int64, error) {
	rc, err := c.UnixConn.SyscallConn()
	if err != nil {
		return 0, err
	}
	fc, err := file.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sent int64
	var serr error
	ferr := fc.Control(func(ffd uintptr) {
		werr := rc.Write(func(sfd uintptr) bool {
			for sent < n {
				o := off + sent
				k, e := unix.Sendfile(int(sfd), int(ffd), &o, int(n-sent))
				if k > 0 {
					sent += int64(k)
				}
				switch {
				case e == unix.EAGAIN:
					return false // wait until the socket takes more
				case e == unix.EINTR:
					continue
				case e != nil:
					serr = os.NewSyscallError("sendfile", e)
					return true
				case k == 0:
					serr = io.ErrUnexpectedEOF // the file is shorter than its landed bytes: cut
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if serr == nil {
		serr = ferr
	}
	c.n += sent
	return sent, serr
}
