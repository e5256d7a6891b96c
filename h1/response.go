package h1

import "strconv"

// AppendStatusLine appends "HTTP/1.1 <code> <reason>\r\n" to dst. Responses
// are always labelled HTTP/1.1, as RFC 9110 §6.2 asks, even to HTTP/1.0
// clients.
func AppendStatusLine(dst []byte, code int) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ' ')
	dst = append(dst, StatusText(code)...)
	return append(dst, "\r\n"...)
}

// AppendHeader appends "name: value\r\n". The caller guarantees that name
// is a token and value holds no CR or LF.
func AppendHeader(dst []byte, name, value string) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}

// AppendHeaderBytes is AppendHeader for a byte-slice value.
func AppendHeaderBytes(dst []byte, name string, value []byte) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}

// AppendHeaderInt appends "name: n\r\n".
func AppendHeaderInt(dst []byte, name string, n int64) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, "\r\n"...)
}

// StatusText returns the reason phrase for the codes the engine sends.
func StatusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 204:
		return "No Content"
	case 206:
		return "Partial Content"
	case 301:
		return "Moved Permanently"
	case 304:
		return "Not Modified"
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 412:
		return "Precondition Failed"
	case 413:
		return "Content Too Large"
	case 414:
		return "URI Too Long"
	case 416:
		return "Range Not Satisfiable"
	case 421:
		return "Misdirected Request"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 503:
		return "Service Unavailable"
	case 505:
		return "HTTP Version Not Supported"
	case 201:
		return "Created"
	case 202:
		return "Accepted"
	case 302:
		return "Found"
	case 303:
		return "See Other"
	case 307:
		return "Temporary Redirect"
	case 308:
		return "Permanent Redirect"
	case 401:
		return "Unauthorized"
	case 409:
		return "Conflict"
	case 410:
		return "Gone"
	case 422:
		return "Unprocessable Content"
	case 429:
		return "Too Many Requests"
	case 502:
		return "Bad Gateway"
	case 504:
		return "Gateway Timeout"
	}
	return "Status " + strconv.Itoa(code)
}
