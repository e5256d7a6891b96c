package engine

import (
	"strconv"

	"github.com/mediaship/engine/engine/files"
)

// responseFields calls add for each header field of resp that HTTP/2 and
// HTTP/3 send (HTTP/1.1 writes the same fields as bytes in http1.go),
// giving the name in both spellings: lowercase for HPACK, canonical for
// quic-go's http.Header. Date is the caller's. s may be nil.
func responseFields(resp *files.Response, s *site, add func(lower, canonical, value string)) {
	add("server", "Server", "engine")
	if resp.ContentType != "" {
		add("content-type", "Content-Type", resp.ContentType)
	}
	if resp.Status != 304 {
		add("content-length", "Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if resp.ContentEncoding != "" {
		add("content-encoding", "Content-Encoding", resp.ContentEncoding)
	}
	if resp.Vary {
		add("vary", "Vary", "Accept-Encoding")
	}
	if resp.LastModified != "" {
		add("last-modified", "Last-Modified", resp.LastModified)
	}
	if resp.ETag != "" {
		add("etag", "Etag", resp.ETag)
	}
	if resp.AcceptRanges {
		add("accept-ranges", "Accept-Ranges", "bytes")
	}
	if resp.ContentRange != nil {
		add("content-range", "Content-Range", string(resp.ContentRange))
	}
	if resp.Location != nil {
		add("location", "Location", string(resp.Location))
	}
	if resp.Allow {
		add("allow", "Allow", "GET, HEAD")
	}
	if resp.ReprDigest != "" {
		add("repr-digest", "Repr-Digest", resp.ReprDigest)
	}
	if resp.RetryAfter > 0 {
		add("retry-after", "Retry-After", strconv.Itoa(resp.RetryAfter))
	}
	if s != nil && s.altSvc != "" {
		add("alt-svc", "Alt-Svc", s.altSvc)
	}
}
