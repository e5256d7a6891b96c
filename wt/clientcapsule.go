package wt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go/http3"
)

// ErrMalformedCapsule is a capsule on a CONNECT stream that does not
// parse as its type says.
var ErrMalformedCapsule = errors.New("wt: malformed capsule")

// parseCloseCapsule reads a close capsule's payload: "a 32-bit error
// code followed by a UTF-8 message of at most 1024 bytes" (draft §5).
func parseCloseCapsule(r http3.CapsuleReader) (uint32, string, error) {
	n := r.Remaining()
	if n < 4 || n > 4+maxCloseMessage {
		return 0, "", fmt.Errorf("%w: close capsule of %d bytes", ErrMalformedCapsule, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, "", err
	}
	return binary.BigEndian.Uint32(b), string(b[4:]), nil
}
