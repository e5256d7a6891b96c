package passthrough

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"

	"github.com/mediaship/engine/quicinitial"
	"github.com/quic-go/quic-go"
)

// OwnCIDs issues the connection IDs of the engine's own HTTP/3 when QUIC
// passthrough shares its socket, and recognizes them, so that the router
// tells a packet for the engine's own connections from one for a relayed
// connection by its Destination Connection ID rather than by a guess.
//
// An ID is the generation, 7 random bytes and a tag: the first bytes of
// AES-128, under a key drawn when the engine starts and never leaving
// the process, over the eight before it. So the IDs of one connection give
// an observer nothing to link (RFC 9000 §5.1), nobody without the key
// can make one, and a relayed connection's ID passes for the engine's
// with a chance of one in 2^32.
//
// The first byte of every ID is the generation of the engine's QUIC
// endpoint that issued it (each reload or binary upgrade starts one), in
// the clear: the kernel's steering program (reuseport.QUICSteering)
// reads it to give a draining generation the packets of its own
// connections. It is the same for every connection of a generation, as a
// QUIC-LB server ID is, and links none to another.
//
// Immutable after construction and safe for concurrent use: quic-go
// calls GenerateConnectionID from its goroutines, the router calls mine
// from its reading one.
type OwnCIDs struct {
	block cipher.Block
	gen   byte
}

const (
	ownCIDRandom = 8                // the generation and 7 random bytes: unique among every ID in use
	ownCIDLen    = ownCIDRandom + 4 // and a 4-byte tag
)

// NewOwnCIDs makes the IDs of generation gen.
func NewOwnCIDs(gen byte) *OwnCIDs {
	key := make([]byte, 16)
	rand.Read(key) // never fails (it crashes the program instead)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // unreachable: the key is 16 bytes
	}
	return &OwnCIDs{block: block, gen: gen}
}

// GenerateConnectionID makes a new ID (quic.ConnectionIDGenerator).
func (g *OwnCIDs) GenerateConnectionID() (quic.ConnectionID, error) {
	var id [ownCIDLen]byte
	var buf [aes.BlockSize]byte
	id[0] = g.gen
	rand.Read(id[1:ownCIDRandom])
	g.tag(&buf, id[:ownCIDRandom])
	copy(id[ownCIDRandom:], buf[:])
	return quic.ConnectionIDFromBytes(id[:]), nil
}

// ConnectionIDLen is the length of every ID (quic.ConnectionIDGenerator).
func (g *OwnCIDs) ConnectionIDLen() int { return ownCIDLen }

// mine reports whether id is one of these IDs. buf is scratch memory of
// the caller's, so that the check allocates nothing.
func (g *OwnCIDs) mine(id []byte, buf *[aes.BlockSize]byte) bool {
	if len(id) != ownCIDLen {
		return false
	}
	g.tag(buf, id[:ownCIDRandom])
	return bytes.Equal(buf[:ownCIDLen-ownCIDRandom], id[ownCIDRandom:])
}

// tag leaves the tag of random at the start of buf.
func (g *OwnCIDs) tag(buf *[aes.BlockSize]byte, random []byte) {
	*buf = [aes.BlockSize]byte{}
	copy(buf[:], random)
	g.block.Encrypt(buf[:], buf[:])
}

// ownDCID is where the Destination Connection ID of an ID of OwnCIDs
// would be in datagram d (of the first packet: a long header's, or the
// bytes after a short header's first byte), or nil.
func ownDCID(d []byte, long quicinitial.Packet, isLong bool) []byte {
	switch {
	case isLong:
		return long.DCID
	case len(d) > ownCIDLen:
		return d[1 : 1+ownCIDLen]
	}
	return nil
}
