package wt

import (
	"encoding/binary"
	"fmt"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// Stream signals (draft-ietf-webtrans-http3 §4.2, §4.3): the first varint
// of a WebTransport stream, followed by the session ID.
const (
	// BidiSignal opens a bidirectional stream bound to a session.
	BidiSignal = 0x41
	// UniType is the unidirectional stream type bound to a session.
	UniType = 0x54
)

// SETTINGS (§9.2), offered by a server that serves sessions.
const (
	settingWTEnabled          = 0x2c7cf000 // SETTINGS_WT_ENABLED (draft 13 and later)
	settingWTMaxSessions      = 0x14e9cd29 // SETTINGS_WT_MAX_SESSIONS (draft 13 and later)
	settingEnableWTDraft02    = 0x2b603742 // SETTINGS_ENABLE_WEBTRANSPORT (drafts 02-06)
	settingWTMaxSessionsD07   = 0xc671706a // SETTINGS_WEBTRANSPORT_MAX_SESSIONS (drafts 07-12)
	protocolDraft15           = "webtransport-h3"
	protocolBeforeDraft15     = "webtransport"
	capsuleClose              = http3.CapsuleType(0x2843)        // CLOSE_WEBTRANSPORT_SESSION
	capsuleDrain              = http3.CapsuleType(0x78ae)        // DRAIN_WEBTRANSPORT_SESSION
	maxCloseMessage           = 1024                             // bytes of a CLOSE capsule's message (§6)
	errBufferedStreamRejected = quic.StreamErrorCode(0x3994bd84) // WT_BUFFERED_STREAM_REJECTED
	errSessionGone            = quic.StreamErrorCode(0x170d7b68) // WT_SESSION_GONE
)

// Application error codes are mapped into HTTP/3's space skipping the
// reserved (GREASE) codepoints 0x1f×N+0x21 (§9.5).
const (
	firstAppCode = 0x52e4a40fa8db
	lastAppCode  = 0x52e5ac983162
)

// StreamCode maps a WebTransport application error code to the HTTP/3
// error code a stream reset carries.
func StreamCode(n uint32) quic.StreamErrorCode {
	return quic.StreamErrorCode(firstAppCode + uint64(n) + uint64(n)/0x1e)
}

// AppCode maps an HTTP/3 stream error code back to the WebTransport
// application code, or reports false when it is not one.
func AppCode(h quic.StreamErrorCode) (uint32, bool) {
	c := uint64(h)
	if c < firstAppCode || c > lastAppCode || (c-0x21)%0x1f == 0 {
		return 0, false
	}
	d := c - firstAppCode
	return uint32(d - d/0x1f), true
}

// IsProtocol reports whether an extended CONNECT's :protocol asks for a
// WebTransport session.
func IsProtocol(p string) bool { return p == protocolDraft15 || p == protocolBeforeDraft15 }

// appendClose appends a CLOSE_WEBTRANSPORT_SESSION capsule.
func appendClose(b []byte, code uint32, msg string) []byte {
	if len(msg) > maxCloseMessage {
		msg = msg[:maxCloseMessage]
	}
	b = quicvarint.Append(b, uint64(capsuleClose))
	b = quicvarint.Append(b, uint64(4+len(msg)))
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, msg...)
}

// appendDrain appends a DRAIN_WEBTRANSPORT_SESSION capsule.
func appendDrain(b []byte) []byte {
	b = quicvarint.Append(b, uint64(capsuleDrain))
	return quicvarint.Append(b, 0)
}

// SessionError is how a session ended: the code and message of the
// CLOSE_WEBTRANSPORT_SESSION capsule (code 0 and no message for a FIN
// without one), which side sent it, and for an abrupt end (a reset
// CONNECT stream, a closed connection) no capsule. A Session's and a
// ClientSession's say the same things, each from its own side.
type SessionError struct {
	Code    uint32
	Message string
	Remote  bool // the peer closed it: the client, in a server's Session; the server, in a ClientSession
	Abrupt  bool // no capsule: the CONNECT stream or the connection went away

	client bool // a ClientSession's: its peer is the server
}

func (e *SessionError) Error() string {
	if e.Abrupt {
		return fmt.Sprintf("webtransport: session gone (%s)", e.Message)
	}
	return fmt.Sprintf("webtransport: session closed by the %s: code %#x %q", e.side(), e.Code, e.Message)
}
