package files

import "errors"

// ErrBadPath is a request path that cannot name a file beneath a root: a
// ".." segment, a NUL or backslash, or broken percent-encoding.
var ErrBadPath = errors.New("files: path not allowed")

// CleanPath percent-decodes a request path exactly once and returns it
// relative to the root ("" for the root itself), with dirSlash set when it
// ended in "/". Any ".." segment, a NUL, a backslash, or a malformed escape
// is refused rather than normalised: a client has no reason to send one.
// "." segments and repeated slashes are dropped.
func CleanPath(raw []byte, dst []byte) (rel []byte, dirSlash bool, err error) {
	if len(raw) == 0 || raw[0] != '/' {
		return nil, false, ErrBadPath
	}
	dst = dst[:0]
	segStart := 0 // index in dst where the current segment starts
	flush := func() error {
		seg := dst[segStart:]
		switch string(seg) {
		case "..":
			return ErrBadPath
		case ".":
			dst = dst[:segStart]
		case "":
		default:
			dst = append(dst, '/')
		}
		segStart = len(dst)
		return nil
	}
	for i := 1; i < len(raw); i++ {
		c := raw[i]
		if c == '%' {
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return nil, false, ErrBadPath
			}
			c = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
		}
		switch c {
		case 0, '\\':
			return nil, false, ErrBadPath
		case '/':
			if err := flush(); err != nil {
				return nil, false, err
			}
			continue
		}
		dst = append(dst, c)
	}
	if err := flush(); err != nil {
		return nil, false, err
	}
	dirSlash = len(raw) > 0 && raw[len(raw)-1] == '/'
	if n := len(dst); n > 0 && dst[n-1] == '/' {
		dst = dst[:n-1]
	}
	return dst, dirSlash, nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f'
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}
