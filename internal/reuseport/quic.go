package reuseport

import (
	"net/netip"
	"os"
)

// QUICSteering spreads the datagrams arriving at one UDP port over a
// SO_REUSEPORT group of sockets, one per generation of the engine's QUIC
// endpoint (each reload or binary upgrade starts one), by the first byte
// of the Destination Connection ID, which each generation sets to its
// own number in every ID it issues: a datagram of a connection goes to
// the socket of the generation that holds the connection, so that a
// draining generation keeps every packet of its connections while the
// new one takes every new connection. A client's first packets (Initial
// and 0-RTT, whose ID the client chose) and any ID no socket is
// registered for go to the current generation's socket.
//
// The program and its maps outlive the process that made them as long
// as a socket of the group or a descriptor (Files, passed to a new
// process) holds them.
type QUICSteering struct {
	objs quicObjects
}

// ListenUDP opens a UDP socket on addr with SO_REUSEPORT, for a group
// that QUICSteering steers: the first of a group with checkFree (nothing
// may listen there already), each later one joining it.
func ListenUDP(addr string, checkFree bool) (fd int, bound string, err error) {
	return listenUDP(addr, checkFree)
}

// SteerQUIC loads the program, attaches it to fd's group and registers
// fd as generation gen's socket, the current one.
func SteerQUIC(fd int, gen uint8) (*QUICSteering, error) { return steerQUIC(fd, gen) }

// Add registers fd as generation gen's socket (replacing any socket
// registered for gen); datagrams for its connections go to it.
func (s *QUICSteering) Add(gen uint8, fd int) error { return s.objs.add(gen, fd) }

// SetCurrent makes gen the generation new connections go to.
func (s *QUICSteering) SetCurrent(gen uint8) error { return s.objs.setCurrent(gen) }

// Current is the generation new connections go to.
func (s *QUICSteering) Current() (uint8, error) { return s.objs.current() }

// HoldRelay sends client's datagrams to generation gen, before any
// connection ID is looked at: a relayed (passthrough) flow's IDs are its
// upstream's, which name no generation, so its client's address keeps
// it where it is relayed. DropRelay forgets it when its last flow ends.
func (s *QUICSteering) HoldRelay(client netip.AddrPort, gen uint8) error {
	return s.objs.holdRelay(client, gen)
}

// DropRelay forgets client's relayed flows (HoldRelay).
func (s *QUICSteering) DropRelay(client netip.AddrPort) { s.objs.dropRelay(client) }

// Remove forgets generation gen's socket (closing the socket does too).
func (s *QUICSteering) Remove(gen uint8) { s.objs.remove(gen) }

// Files duplicates the descriptors of the program and its maps, for a
// new process's AdoptQUIC.
func (s *QUICSteering) Files() ([]*os.File, error) { return s.objs.files() }

// AdoptQUIC takes over a steering passed by Files (and closes them).
func AdoptQUIC(fs []*os.File) (*QUICSteering, error) { return adoptQUIC(fs) }

// Close releases this process's hold on the program and its maps.
func (s *QUICSteering) Close() error { return s.objs.close() }
