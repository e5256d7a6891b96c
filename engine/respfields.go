package engine

import (
	"net/http"
	"strconv"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/h1"
	"golang.org/x/net/http2/hpack"
)

// fieldWriter takes a response's header fields in one protocol's form.
// Each name comes in both spellings: lowercase (HTTP/2 and HTTP/3) and as
// HTTP/1.1 writes it.
type fieldWriter interface {
	policy.Writer // Field: as field, for the policy's fields
	field(lower, canonical, value string)
	fieldBytes(lower, canonical string, value []byte)
	fieldInt(lower, canonical string, v int64)
	// fieldParts writes head + "?" + q + tail as one value.
	fieldParts(lower, canonical string, head, q, tail []byte)
}

// joinParts is fieldParts's value, for the writers that need it whole.
func joinParts(head, q, tail []byte) string {
	return string(head) + "?" + string(q) + string(tail)
}

// writeFields gives w the header fields of resp, for every protocol: the
// one list of what a response says. date is the Date value (nil: the
// protocol library adds it). s may be nil, and pr (the request's policy:
// what it sets, removes and adds).
func writeFields(w fieldWriter, resp *files.Response, s *site, pr *policy.Resp, date []byte) {
	if !pr.Omits("server", resp.Status) {
		w.field("server", "Server", "engine")
	}
	if date != nil {
		w.fieldBytes("date", "Date", date)
	}
	if ct := resp.ContentType; ct != "" && !pr.Omits("content-type", resp.Status) {
		if resp.File != nil {
			if t := pr.ContentType(); t != "" {
				ct = t
			}
		}
		w.field("content-type", "Content-Type", ct)
	}
	if resp.Status != 304 && resp.Status != 204 {
		w.fieldInt("content-length", "Content-Length", resp.ContentLength)
	}
	if resp.ContentEncoding != "" {
		w.field("content-encoding", "Content-Encoding", resp.ContentEncoding)
	}
	switch origin := pr.VaryOrigin(); {
	case resp.Vary && origin:
		w.field("vary", "Vary", "Accept-Encoding, Origin")
	case resp.Vary:
		w.field("vary", "Vary", "Accept-Encoding")
	case origin:
		w.field("vary", "Vary", "Origin")
	}
	if resp.LastModified != "" {
		w.field("last-modified", "Last-Modified", resp.LastModified)
	}
	if resp.ETag != "" {
		w.field("etag", "ETag", resp.ETag)
	}
	if resp.AcceptRanges {
		w.field("accept-ranges", "Accept-Ranges", "bytes")
	}
	if resp.ContentRange != nil {
		w.fieldBytes("content-range", "Content-Range", resp.ContentRange)
	}
	if resp.Location != nil {
		w.fieldBytes("location", "Location", resp.Location)
	}
	if resp.Allow {
		w.field("allow", "Allow", "GET, HEAD")
	}
	if resp.ReprDigest != "" {
		w.field("repr-digest", "Repr-Digest", resp.ReprDigest)
	}
	if resp.Link != nil && !pr.Omits("link", resp.Status) {
		if head, q, tail := pr.LinkParts(resp.Link); q != nil {
			w.fieldParts("link", "Link", head, q, tail)
		} else {
			w.fieldBytes("link", "Link", resp.Link)
		}
	}
	if resp.RetryAfter > 0 {
		w.fieldInt("retry-after", "Retry-After", int64(resp.RetryAfter))
	}
	if s != nil && s.altSvc != "" {
		w.field("alt-svc", "Alt-Svc", s.altSvc)
	}
	st := resp.Status
	pr.Write(w, st, s != nil && (st == 200 || st == 206 || st == 304))
}

// h1Fields appends fields as HTTP/1.1 header lines.
type h1Fields struct{ b []byte }

func (w *h1Fields) field(_, name, value string) { w.b = h1.AppendHeader(w.b, name, value) }
func (w *h1Fields) Field(_, name, value string) { w.b = h1.AppendHeader(w.b, name, value) }
func (w *h1Fields) fieldBytes(_, name string, value []byte) {
	w.b = h1.AppendHeaderBytes(w.b, name, value)
}
func (w *h1Fields) fieldInt(_, name string, v int64) { w.b = h1.AppendHeaderInt(w.b, name, v) }
func (w *h1Fields) fieldParts(_, name string, head, q, tail []byte) {
	b := append(append(w.b, name...), ": "...)
	b = append(append(append(b, head...), '?'), q...)
	w.b = append(append(b, tail...), "\r\n"...)
}

// hpackFields collects fields for HPACK (HTTP/2).
type hpackFields struct{ f []hpack.HeaderField }

func (w *hpackFields) field(name, _, value string) {
	w.f = append(w.f, hpack.HeaderField{Name: name, Value: value})
}
func (w *hpackFields) Field(name, _, value string) {
	w.f = append(w.f, hpack.HeaderField{Name: name, Value: value})
}
func (w *hpackFields) fieldBytes(name, _ string, value []byte) { w.field(name, "", string(value)) }
func (w *hpackFields) fieldParts(name, _ string, head, q, tail []byte) {
	w.field(name, "", joinParts(head, q, tail))
}
func (w *hpackFields) fieldInt(name, _ string, v int64) {
	w.field(name, "", strconv.FormatInt(v, 10))
}

// headerFields sets fields on an http.Header (HTTP/3 through quic-go).
type headerFields http.Header

func (w headerFields) field(_, name, value string) { w[name] = []string{value} }
func (w headerFields) Field(_, name, value string) { http.Header(w).Add(name, value) }
func (w headerFields) fieldBytes(_, name string, value []byte) {
	w[name] = []string{string(value)}
}
func (w headerFields) fieldParts(_, name string, head, q, tail []byte) {
	w[name] = []string{joinParts(head, q, tail)}
}
func (w headerFields) fieldInt(_, name string, v int64) {
	w[name] = []string{strconv.FormatInt(v, 10)}
}
