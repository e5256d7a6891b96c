package digests

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/integrity"
)

// fdIdentity is the identity of an open file now.
func fdIdentity(fd int) (integrity.FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return integrity.FileID{}, os.NewSyscallError("fstat", err)
	}
	return integrity.FileID{Dev: st.Dev, Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano()}, nil
}
