package wt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// Numbers of draft-ietf-webtrans-http3 that both ends use.
const (
	// settingsWTEnabled is SETTINGS_WT_ENABLED: non-zero offers
	// WebTransport.
	settingsWTEnabled = 0x2c7cf000
	// uniStreamType starts a WebTransport unidirectional stream, followed
	// by the session ID.
	uniStreamType = 0x54
	// bidiSignal (WT_STREAM) starts a WebTransport bidirectional stream,
	// followed by the session ID.
	bidiSignal = 0x41

	closeCapsuleType http3.CapsuleType = 0x2843 // CLOSE_WEBTRANSPORT_SESSION
	drainCapsuleType http3.CapsuleType = 0x78ae // DRAIN_WEBTRANSPORT_SESSION
	// maxCloseMessage bounds a close capsule's message: "at most 1024
	// bytes" (draft §5).
	maxCloseMessage = 1024

	// codeSessionGone (WT_SESSION_GONE) resets the streams of a session
	// that ended.
	codeSessionGone quic.StreamErrorCode = 0x170d7b68
	// codeBufferedStreamRejected (WT_BUFFERED_STREAM_REJECTED) resets a
	// stream whose session is not (or no longer) there.
	codeBufferedStreamRejected quic.StreamErrorCode = 0x3994bd84

	// appCodeFirst is the HTTP/3 error code of WebTransport application
	// error code 0; code N is appCodeFirst + N + N/0x1e, skipping the
	// reserved codes 0x1f × k + 0x21 (draft §4.4).
	appCodeFirst = 0x52e4a40fa8db
	appCodeLast  = appCodeFirst + 0xffffffff + 0xffffffff/0x1e
)

// StreamErrorCode is the HTTP/3 (QUIC) error code that carries
// WebTransport application error code code when a stream is reset.
func StreamErrorCode(code uint32) quic.StreamErrorCode {
	return quic.StreamErrorCode(appCodeFirst + uint64(code) + uint64(code)/0x1e)
}

// AppErrorCode is the WebTransport application error code an HTTP/3
// stream error code carries, and false when it carries none (it is an
// HTTP/3 code, or a reserved one).
func AppErrorCode(h quic.StreamErrorCode) (uint32, bool) {
	if h < appCodeFirst || h > appCodeLast || (uint64(h)-0x21)%0x1f == 0 {
		return 0, false
	}
	shifted := uint64(h) - appCodeFirst
	return uint32(shifted - shifted/0x1f), true
}

// ErrMalformedCapsule is a capsule on a CONNECT stream that does not
// parse as its type says.
var ErrMalformedCapsule = errors.New("wt: malformed capsule")

// appendCloseCapsule appends CLOSE_WEBTRANSPORT_SESSION with code and
// msg (cut to maxCloseMessage bytes) to b.
func appendCloseCapsule(b []byte, code uint32, msg string) []byte {
	msg = msg[:min(len(msg), maxCloseMessage)]
	b = quicvarint.Append(b, uint64(closeCapsuleType))
	b = quicvarint.Append(b, uint64(4+len(msg)))
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, msg...)
}

// appendDrainCapsule appends DRAIN_WEBTRANSPORT_SESSION (no payload).
func appendDrainCapsule(b []byte) []byte {
	b = quicvarint.Append(b, uint64(drainCapsuleType))
	return quicvarint.Append(b, 0)
}

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
