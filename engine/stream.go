package engine

import (
	"io"

	"github.com/mediaship/engine/engine/reactor"
)

// stream is one connection's plaintext byte stream, as the HTTP/1.1
// driver sees it: the TCP socket itself (plainStream), or TLS over it
// (tlsConn), which seals records in userspace or hands transmission to
// the kernel.
type stream interface {
	input() []byte // plaintext received and not yet consumed
	consume(n int)
	eof() bool // the peer has finished sending

	startResponse()                 // a response's head follows
	write(p []byte)                 // queue a copy of p
	writeRef(p []byte)              // queue p; the caller keeps it until busy() is false
	writeFile(fd int, off, n int64) // queue a file range; fd stays open until busy() is false
	// pump moves queued output towards the socket (sealing records,
	// promoting to kernel TLS); the driver calls it before busy.
	pump()
	busy() bool // queued output not yet all written to the socket
	// closeGracefully ends the connection after the queued output (with a
	// close_notify alert on TLS).
	closeGracefully()
	sent() int64 // plaintext bytes written so far, for the access log
}

// plainStream is a stream straight over the socket.
type plainStream struct{ c *reactor.Conn }

func (p plainStream) input() []byte                  { return p.c.Input() }
func (p plainStream) consume(n int)                  { p.c.Consume(n) }
func (p plainStream) eof() bool                      { return p.c.EOF() }
func (p plainStream) startResponse()                 {}
func (p plainStream) write(b []byte)                 { p.c.Write(b) }
func (p plainStream) writeRef(b []byte)              { p.c.WriteRef(b) }
func (p plainStream) writeFile(fd int, off, n int64) { p.c.SendFile(fd, off, n) }
func (p plainStream) pump()                          {}
func (p plainStream) busy() bool                     { return p.c.Pending() }
func (p plainStream) closeGracefully()               { p.c.CloseAfterFlush() }
func (p plainStream) sent() int64                    { return p.c.Sent() }

var ioEOF = io.EOF
