//go:build !linux

package engine

import (
	"io"
	"os"
)

// sendFile copies through this process where there is no sendfile into a
// Unix socket.
func (c *countedConn) sendFile(file *os.File, off, n int64) (int64, error) {
	return io.Copy(c, io.NewSectionReader(file, off, n))
}
