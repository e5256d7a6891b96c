package files

import (
	"bytes"
	"time"
)

// precondition is the outcome of evaluating conditional headers.
type precondition uint8

const (
	condProceed     precondition = iota
	condNotModified              // 304
	condFailed                   // 412
)

// Headers gives the file layer the request header values it needs.
// *h1.Request satisfies it.
type Headers interface {
	Get(lowercaseName string) []byte
}

// evalPreconditions applies RFC 9110 §13.2.2 in its order: If-Match, then
// If-Unmodified-Since (only without If-Match), then If-None-Match, then
// If-Modified-Since (only without If-None-Match).
//
// etag is the current entity-tag; old, the size-and-time one the file had
// before its digest was known, still matches so caches holding it are not
// invalidated by the digest arriving; so does also, another strong tag of
// the same bytes when not empty (an edge cache object's, from its
// origin).
func evalPreconditions(h Headers, etag, old, also string, mtime time.Time) precondition {
	if im := h.Get("if-match"); im != nil {
		if !etagListMatch(im, etag, true) && !etagListMatch(im, old, true) && (also == "" || !etagListMatch(im, also, true)) {
			return condFailed
		}
	} else if ius := h.Get("if-unmodified-since"); ius != nil {
		if t, ok := parseHTTPDate(ius); ok && mtime.Truncate(time.Second).After(t) {
			return condFailed
		}
	}
	if inm := h.Get("if-none-match"); inm != nil {
		if etagListMatch(inm, etag, false) || etagListMatch(inm, old, false) || also != "" && etagListMatch(inm, also, false) {
			return condNotModified
		}
	} else if ims := h.Get("if-modified-since"); ims != nil {
		if t, ok := parseHTTPDate(ims); ok && !mtime.Truncate(time.Second).After(t) {
			return condNotModified
		}
	}
	return condProceed
}

// ifRangeAllows reports whether a Range may be honoured given If-Range
// (RFC 9110 §13.1.5): the validator must match the current representation,
// an entity-tag by strong comparison or a date exactly.
func ifRangeAllows(h Headers, etag, old, also, lastModified string) bool {
	ir := h.Get("if-range")
	if ir == nil {
		return true
	}
	ir = trimOWS(ir)
	if len(ir) > 0 && (ir[0] == '"' || bytes.HasPrefix(ir, []byte("W/"))) {
		return strongMatch(ir, etag) || strongMatch(ir, old) || also != "" && strongMatch(ir, also)
	}
	return string(ir) == lastModified
}

// etagListMatch matches "*" or a comma-separated list of entity-tags
// against etag, by strong or weak comparison (RFC 9110 §8.8.3.2).
func etagListMatch(list []byte, etag string, strong bool) bool {
	list = trimOWS(list)
	if len(list) == 1 && list[0] == '*' {
		return true
	}
	for len(list) > 0 {
		list = trimOWS(list)
		if len(list) > 0 && list[0] == ',' {
			list = list[1:]
			continue
		}
		weak := false
		if bytes.HasPrefix(list, []byte("W/")) {
			weak = true
			list = list[2:]
		}
		if len(list) == 0 || list[0] != '"' {
			return false // malformed: match nothing
		}
		end := bytes.IndexByte(list[1:], '"')
		if end < 0 {
			return false
		}
		tag := list[:end+2]
		list = list[end+2:]
		if string(tag) == etag && (!strong || !weak) {
			return true
		}
	}
	return false
}

func strongMatch(tag []byte, etag string) bool {
	return len(tag) > 0 && tag[0] == '"' && string(tag) == etag
}

var httpDateLayouts = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",  // IMF-fixdate
	"Monday, 02-Jan-06 15:04:05 GMT", // obsolete RFC 850
	"Mon Jan _2 15:04:05 2006",       // obsolete asctime
}

func parseHTTPDate(b []byte) (time.Time, bool) {
	s := string(trimOWS(b))
	for _, l := range httpDateLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
