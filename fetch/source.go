package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/mediaship/engine/integrity"
)

// Errors a source is dropped for: the server broke the range protocol.
var (
	ErrNotPartial   = errors.New("answered a range request with the whole file (200): no ranges, or the file changed")
	ErrContentRange = errors.New("wrong Content-Range")
	ErrLength       = errors.New("wrong Content-Length")
	ErrShortBody    = errors.New("body ended before the range did")
)

// Source is one server of the file: the URL or a mirror. Its counters
// are for the summary.
type Source struct {
	// Immutable after probe.
	URL     string
	size    int64
	digest  *integrity.Digest // from Repr-Digest; nil without one
	etag    string            // strong, for If-Range; "" without one
	treeURL string
	linked  bool // the response linked a tree: the server makes them (engine), so a digest will come

	mu       sync.Mutex // guards the fields below
	bytes    int64      // body bytes received for the file's ranges
	wrong    int        // groups that failed their check
	netFails int        // network failures in a row
	failures int        // all failures
	dropped  string     // why it was dropped; "" while it serves
	nanos    int64      // time spent receiving
}

// probe asks the source for the file's first byte, to learn its size,
// digest, ETag and tree, and that it answers ranges.
func (s *Source) probe(ctx context.Context, c *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", "bytes=0-0")
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch resp.StatusCode {
	case 206:
	case 200:
		if resp.ContentLength == 0 { // an empty file has no byte 0
			s.size = 0
			return s.learn(resp)
		}
		return ErrNotPartial
	case 416: // an empty file has no byte 0
		total, ok := strings.CutPrefix(resp.Header.Get("Content-Range"), "bytes */")
		if n, err := strconv.ParseInt(total, 10, 64); ok && err == nil && n == 0 {
			s.size = 0
			return s.learn(resp)
		}
		return fmt.Errorf("status 416 for bytes=0-0 (Content-Range %q)", resp.Header.Get("Content-Range"))
	default:
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	a, b, total, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || a != 0 || b != 0 || total < 1 {
		return fmt.Errorf("%w: %q for bytes=0-0", ErrContentRange, resp.Header.Get("Content-Range"))
	}
	s.size = total
	return s.learn(resp)
}

// learn takes the digest, ETag and tree link of a probe's response.
func (s *Source) learn(resp *http.Response) error {
	if v := resp.Header.Get("Repr-Digest"); v != "" {
		d, err := integrity.ParseHeaderValue(v)
		if err != nil && !errors.Is(err, integrity.ErrNoFieldDigest) {
			return err
		}
		if err == nil {
			s.digest = &d
		}
	}
	if et := resp.Header.Get("ETag"); strings.HasPrefix(et, `"`) {
		s.etag = et
	}
	s.treeURL = s.URL + integrity.OutboardSidecar // the documented derived name
	if link := OutboardLink(resp.Header.Values("Link")); link != "" {
		if u, err := resp.Request.URL.Parse(link); err == nil {
			s.treeURL, s.linked = u.String(), true
		}
	}
	return nil
}

// OutboardLink finds, in a response's Link field values, the target of
// the link to the file's outboard tree (integrity.OutboardRel); "" when
// there is none.
func OutboardLink(values []string) string {
	for _, v := range values {
		for _, l := range strings.Split(v, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(l), ";")
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "rel") && strings.Trim(v, `"`) == integrity.OutboardRel {
					return target[1 : len(target)-1]
				}
			}
		}
	}
	return ""
}

// parseContentRange reads "bytes A-B/SIZE".
func parseContentRange(v string) (a, b, size int64, err error) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	span, total, ok2 := strings.Cut(rest, "/")
	first, last, ok3 := strings.Cut(span, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, 0, ErrContentRange
	}
	if a, err = strconv.ParseInt(first, 10, 64); err == nil {
		if b, err = strconv.ParseInt(last, 10, 64); err == nil {
			size, err = strconv.ParseInt(total, 10, 64)
		}
	}
	if err != nil || a < 0 || b < a || size <= b {
		return 0, 0, 0, ErrContentRange
	}
	return a, b, size, nil
}

// fetchTree downloads the source's outboard tree, at most max bytes.
func (s *Source) fetchTree(ctx context.Context, c *http.Client, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.treeURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, &statusError{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	}
	if resp.ContentLength >= 0 {
		// Its length is known from the file's: read exactly that.
		if resp.ContentLength != max {
			return nil, fmt.Errorf("tree of %d bytes, want %d", resp.ContentLength, max)
		}
		b := make([]byte, max)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("tree longer than %d bytes", max)
	}
	return b, nil
}

// statusError is an unexpected status, with Retry-After for a 503.
type statusError struct {
	code       int
	retryAfter string
}

func (e *statusError) Error() string { return "status " + strconv.Itoa(e.code) }

// openRange requests bytes [off, off+n) and checks that the answer is
// exactly that range of the file: a 206 with its Content-Range and
// Content-Length. The caller reads n bytes of the body and closes it.
func (s *Source) openRange(ctx context.Context, c *http.Client, off, n int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	req.Header.Set("Accept-Encoding", "identity")
	if s.etag != "" {
		req.Header.Set("If-Range", s.etag)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (io.ReadCloser, error) {
		resp.Body.Close()
		return nil, err
	}
	switch resp.StatusCode {
	case 206:
	case 200:
		return fail(ErrNotPartial)
	default:
		return fail(&statusError{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")})
	}
	a, b, total, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || a != off || b != off+n-1 || total != s.size {
		return fail(fmt.Errorf("%w: %q for bytes=%d-%d of %d", ErrContentRange, resp.Header.Get("Content-Range"), off, off+n-1, s.size))
	}
	if resp.ContentLength >= 0 && resp.ContentLength != n {
		return fail(fmt.Errorf("%w: %d for a range of %d bytes", ErrLength, resp.ContentLength, n))
	}
	return resp.Body, nil
}

// host is the source's URL without its path, for messages.
func (s *Source) host() string {
	if u, err := url.Parse(s.URL); err == nil {
		return u.Host
	}
	return s.URL
}
