package ktls

// TLS alert descriptions (RFC 8446 §6) that the engine sends.
const (
	AlertCloseNotify       = 0
	AlertUnexpectedMessage = 10
	AlertBadRecordMAC      = 20
	AlertRecordOverflow    = 22
	AlertDecodeError       = 50
	AlertInternalError     = 80
	AlertUnrecognizedName  = 112
)

// ClearAlert is a fatal alert record in the clear, as TLS sends one
// before any key is agreed (a connection refused at its ClientHello).
func ClearAlert(desc byte) []byte {
	return []byte{RecordAlert, 3, 3, 0, 2, 2, desc}
}
