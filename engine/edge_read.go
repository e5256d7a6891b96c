package engine

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/edgecache"
	"github.com/mediaship/engine/engine/files"
)

// edgeLookahead is how far past a fill's landed bytes a range may start
// and still be read from the fill: a range further on is asked of the
// origin on its own (edgePass), so its first byte never waits for the
// bytes before it.
const edgeLookahead = 8 << 20

// edgeCloseWait bounds the wait for the exchange to close its end of a
// source after the answer.
const edgeCloseWait = 5 * time.Second

// edgeRead answers one request of a cached route through side (the
// exchange's source: it writes the request there, and takes an
// HTTP/1.1 response ended by the close). With a fill f, from what the
// fill brings: its bytes as they land (the whole object, or one range of
// it), another object (revalidated, or stale after an origin error), the
// origin's small answer, or the request's own relay to the origin; with
// none, the relay. lead is set for the fill's first request: it starts
// the fetch, with its fields (nginx's way: the first client's request
// is the one the origin sees), and is given the origin's response
// itself when that is not for others. cs is the request's Cache-Status.
func (s *Server) edgeRead(o *edgeOrigin, f *edgecache.Fill, lead *edgeReq, cs string, pair *net.UnixConn) {
	if f != nil {
		defer f.Release(false)
	}
	side := &countedConn{UnixConn: pair}
	defer func() { s.stats.EdgeClientBytes.Add(side.n) }()
	side.SetReadDeadline(time.Now().Add(10 * time.Second)) // the exchange writes it at once
	br := bufio.NewReaderSize(side, 16<<10)
	req, err := http.ReadRequest(br)
	var mine chan *http.Response
	if lead != nil {
		var fields http.Header
		if err == nil {
			fields = o.fetchFields(req.Header)
		}
		mine = make(chan *http.Response, 1)
		s.edgeGo(func() { s.edgeFetch(o, f, *lead, fields, mine) })
		defer func() {
			// A response handed to this request after it stopped waiting
			// (its client went, or response_timeout passed) is closed, so
			// that its origin connection does not wait for a reader.
			go func() {
				<-f.Ready()
				select {
				case resp := <-mine:
					resp.Body.Close()
				default:
				}
			}()
		}()
	}
	if err != nil {
		side.Close()
		return
	}
	side.SetReadDeadline(time.Time{})
	// What follows the head (a body, if any) is read and dropped, and the
	// answer ends with a half close, after which the exchange closes its
	// end: a socket closed with bytes unread would reset the exchange's,
	// and with it the response's last bytes.
	drained := make(chan struct{})
	go func() { io.Copy(io.Discard, br); close(drained) }()
	defer func() {
		side.CloseWrite()
		select {
		case <-drained:
		case <-time.After(edgeCloseWait):
		}
		side.Close()
	}()
	if f == nil {
		s.edgePass(o, req, side, cs)
		return
	}
	if start, ok := rangeStart(req); ok && start > f.Written()+edgeLookahead {
		// Far ahead of the fill (a cold object's middle): asked of the
		// origin at once, beside the fetch, not after its head.
		s.edgePass(o, req, side, cs+"; detail=range-ahead-of-fill")
		return
	}
	wait := time.NewTimer(o.r.Cfg.ResponseTimeout.D())
	defer wait.Stop()
	select {
	case <-f.Ready():
	case <-wait.C:
		edgeError(side, http.StatusGatewayTimeout, cs, "the origin did not answer within response_timeout")
		return
	}
	select {
	case resp := <-mine:
		edgeRelay(resp, side, cs) // for this request alone
		return
	default:
	}
	v, bytes, size := f.Answer()
	if bytes {
		s.edgeStream(o, f, v.(*edgeHead), size, req, side, cs)
		return
	}
	a, _ := v.(*edgeSettled)
	switch {
	case a == nil:
		edgeError(side, http.StatusBadGateway, cs, "the origin's response failed")
	case a.obj != nil:
		s.edgeServeObject(a.obj, a.cacheStatus, req, side)
	case a.rawHead != nil:
		b := appendEdgeHead(nil, a.rawHead.status, a.rawHead.fields, cs+"; fwd-status="+strconv.Itoa(a.rawHead.status), int64(len(a.rawBody)))
		side.Write(append(b, a.rawBody...))
	case a.pass:
		s.edgePass(o, req, side, cs)
	case errors.Is(a.err, errNotObject):
		edgeError(side, http.StatusNotFound, cs, "no object here: the path names the bucket")
	case errors.Is(a.err, context.DeadlineExceeded) || isTimeout(a.err):
		edgeError(side, http.StatusGatewayTimeout, cs, "the origin did not answer in time")
	default:
		edgeError(side, http.StatusBadGateway, cs, "the origin could not be reached")
	}
}

// fileSender sends n bytes of file from off by sendfile, returning how
// many it sent.
type fileSender interface {
	sendFile(file *os.File, off, n int64) (int64, error)
}

// countedConn counts the bytes written to it.
type countedConn struct {
	*net.UnixConn
	n int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.UnixConn.Write(p)
	c.n += int64(n)
	return n, err
}

// rangeStart is the first byte of the one range req asks for, when it
// asks for one and has no If-Range; a suffix (the last N bytes) starts
// past any fill, as its object's length is not known yet.
func rangeStart(req *http.Request) (int64, bool) {
	v := req.Header.Get("Range")
	if v == "" || req.Header.Get("If-Range") != "" {
		return 0, false
	}
	r, ok, _ := files.OneRange([]byte(v), 1<<62)
	return r.Off, ok
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// edgeStream answers from a fill's bytes as they land: the whole
// object, its last byte held until the fill is over and its digest
// matched (a fill that fails leaves the answer short, and the exchange
// resets the client's response), or one range of it. A range is not
// held: its bytes cannot be checked before the object is whole, and
// the range's client may not wait for all of it.
func (s *Server) edgeStream(o *edgeOrigin, f *edgecache.Fill, h *edgeHead, size int64, req *http.Request, side net.Conn, cs string) {
	passCS := cs
	cs += "; fwd-status=" + strconv.Itoa(h.status) + "; stored" // being stored, unless its bytes fail their digest (and the answer is cut)
	if !h.verified {
		cs = withDetail(cs, "unverified")
	}
	if v := req.Header.Get("Range"); v != "" && ifRangeHolds(req.Header.Get("If-Range"), h.fields) && size >= 0 {
		r, ok, unsat := files.OneRange([]byte(v), size)
		if unsat {
			b := appendEdgeHead(nil, http.StatusRequestedRangeNotSatisfiable, nil, cs, 0, [2]string{"Content-Range", "bytes */" + strconv.FormatInt(size, 10)})
			side.Write(b)
			return
		}
		if ok {
			if done, _ := f.State(); !done && r.Off > f.Written()+edgeLookahead {
				s.edgePass(o, req, side, passCS+"; detail=range-ahead-of-fill")
				return
			}
			cr := string(files.AppendContentRange(nil, r, size))
			b := appendEdgeHead(nil, http.StatusPartialContent, h.fields, cs, r.Len, [2]string{"Content-Range", cr})
			if _, err := side.Write(b); err == nil {
				s.edgeRest(o, req, h, side, copyFill(f, side, r.Off, r.Len, false))
			}
			return
		}
	}
	b := appendEdgeHead(nil, h.status, h.fields, cs, size)
	if _, err := side.Write(b); err == nil {
		s.edgeRest(o, req, h, side, copyFill(f, side, 0, size, true))
	}
}

// ifRangeHolds reports whether a range's If-Range (RFC 9110 §13.1.5)
// names the object the origin is sending, by its fields: none, its
// strong ETag, or its Last-Modified exactly.
func ifRangeHolds(ir string, fields [][2]string) bool {
	if ir == "" {
		return true
	}
	for _, f := range fields {
		switch {
		case strings.EqualFold(f[0], "ETag") && strings.HasPrefix(f[1], `"`) && ir == f[1]:
			return true
		case strings.EqualFold(f[0], "Last-Modified") && !strings.HasPrefix(ir, `"`) && !strings.HasPrefix(ir, "W/") && ir == f[1]:
			return true
		}
	}
	return false
}

// edgeRest goes on with an answer whose fill could not be written (a
// full disk, an object past max_size): the rest of its bytes are asked
// of the origin as a range (If-Range: the same object, or nothing), so
// the client gets the object, proxied, rather than an error.
func (s *Server) edgeRest(o *edgeOrigin, req *http.Request, h *edgeHead, side net.Conn, c fillCopy) {
	if !errors.Is(c.err, errFillStorage) {
		return // whole, or cut (the client went away, the origin's bytes failed): as it is
	}
	var validator string
	for _, f := range h.fields {
		if strings.EqualFold(f[0], "ETag") && !strings.HasPrefix(f[1], "W/") || validator == "" && strings.EqualFold(f[0], "Last-Modified") {
			validator = f[1]
		}
	}
	if validator == "" {
		return // nothing tells the origin's next bytes are the same object's
	}
	fields := o.fetchFields(req.Header)
	if fields == nil {
		fields = http.Header{}
	}
	want := fmt.Sprintf("bytes %d-", c.off)
	if c.end < 0 {
		fields.Set("Range", fmt.Sprintf("bytes=%d-", c.off)) // its length unstated: the rest, chunked as the answer began
	} else {
		fields.Set("Range", fmt.Sprintf("bytes=%d-%d", c.off, c.end-1))
		want = fmt.Sprintf("bytes %d-%d/", c.off, c.end-1)
	}
	fields.Set("If-Range", validator)
	path, rawQuery, hasQuery := strings.Cut(req.RequestURI, "?")
	var query *string
	if hasQuery {
		query = &rawQuery
	}
	s.stats.EdgePasses.Add(1)
	resp, err := o.do(s.edge.ctx, "GET", path, query, req.Host, fields)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !strings.HasPrefix(resp.Header.Get("Content-Range"), want) {
		return // another object now, or no range: the answer stays cut
	}
	if c.end >= 0 {
		io.CopyN(side, resp.Body, c.end-c.off)
		return
	}
	bp := edgeBufs.Get().(*[]byte)
	defer edgeBufs.Put(bp)
	buf := (*bp)[:len(*bp)-32]
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := fmt.Fprintf(side, "%x\r\n%s\r\n", n, buf[:n]); werr != nil {
				return
			}
		}
		if err == io.EOF {
			io.WriteString(side, "0\r\n\r\n")
			return
		}
		if err != nil {
			return // cut: no last chunk
		}
	}
}

// fillCopy is how far copyFill got: off is the next byte, end the end of
// what was asked (-1: unknown), err nil when all of it was written.
type fillCopy struct {
	off, end int64
	err      error
}

// errFillStorage is a fill that failed for its own disk, not its origin:
// the bytes could not be written or kept.
var errFillStorage = errors.New("edge cache: the object could not be written")

// errShort is a fill that ended before the bytes asked of it.
var errShort = errors.New("edge cache: the fill ended short")

// copyFill writes n bytes of the fill from off (n < 0: to its end,
// chunked) as they land. whole holds the last byte (or the last chunk)
// until the fill is over and good. It reports how far it got.
func copyFill(f *edgecache.Fill, w io.Writer, off, n int64, whole bool) (c fillCopy) {
	bp := edgeBufs.Get().(*[]byte)
	defer edgeBufs.Put(bp)
	buf := *bp
	chunked := n < 0
	if chunked {
		buf = buf[:len(buf)-32] // room for the chunk's framing
	}
	end := off + n
	if chunked {
		end = -1
	}
	defer func() { c.off, c.end = off, end }()
	for {
		done, err := f.State()
		if done && err != nil {
			return fillCopy{err: err} // short: the exchange resets the client's response
		}
		landed := f.Written()
		lim := landed
		if !chunked {
			if whole && !done {
				lim = landed - 1
			}
			lim = min(lim, end)
			if off >= end {
				return fillCopy{}
			}
		}
		if off < lim && !chunked {
			if sf, ok := w.(fileSender); ok {
				// From the page cache into the socket, no copy through
				// this process (sendfile).
				k, err := sf.sendFile(f.File(), off, min(lim-off, 4<<20))
				off += k
				if err != nil {
					return fillCopy{err: err}
				}
				continue
			}
		}
		if off < lim {
			k, err := f.ReadAt(buf[:min(int64(len(buf)), lim-off)], off)
			if k > 0 {
				p := buf[:k]
				if chunked {
					if _, werr := fmt.Fprintf(w, "%x\r\n", k); werr != nil {
						return fillCopy{err: werr}
					}
					p = append(p, "\r\n"...)
				}
				if _, werr := w.Write(p); werr != nil {
					return fillCopy{err: werr} // the exchange went away
				}
				off += int64(k)
				continue
			}
			if err != nil && err != io.EOF {
				return fillCopy{err: err}
			}
		}
		if done && chunked && off >= landed {
			_, err := io.WriteString(w, "0\r\n\r\n")
			return fillCopy{err: err}
		}
		if done {
			return fillCopy{err: errShort}
		}
		// The exchange's read_timeout bounds a stalled fill (it closes
		// side, and the next write fails); so does the fetch's own.
		need := off // the byte at off
		if whole && !chunked {
			need = off + 1 // and one more, held
		}
		<-f.Wait(need)
	}
}

// edgeServeObject answers from a complete object (one revalidated, or
// stale after an origin error): its stored fields, one range of it or
// the whole.
func (s *Server) edgeServeObject(obj *edgecache.Object, cs string, req *http.Request, side net.Conn) {
	file, err := os.Open(obj.Path)
	if err != nil {
		edgeError(side, http.StatusBadGateway, cs, "the stored object is gone")
		return
	}
	defer file.Close()
	m := obj.Meta
	fields := append([][2]string(nil), m.Header...)
	fields = append(fields, [2]string{"Age", strconv.FormatInt(max(int64(time.Since(m.StoredAt)/time.Second), 0), 10)})
	if sum, err := hex.DecodeString(m.BLAKE3); err == nil {
		fields = append(fields, [2]string{"Repr-Digest", "blake3=:" + base64.StdEncoding.EncodeToString(sum) + ":"})
	}
	off, n, status := int64(0), m.Size, http.StatusOK
	if v := req.Header.Get("Range"); v != "" && req.Header.Get("If-Range") == "" {
		r, ok, unsat := files.OneRange([]byte(v), m.Size)
		switch {
		case unsat:
			side.Write(appendEdgeHead(nil, http.StatusRequestedRangeNotSatisfiable, nil, cs, 0, [2]string{"Content-Range", "bytes */" + strconv.FormatInt(m.Size, 10)}))
			return
		case ok:
			off, n, status = r.Off, r.Len, http.StatusPartialContent
			fields = append(fields, [2]string{"Content-Range", string(files.AppendContentRange(nil, r, m.Size))})
		}
	}
	if _, err := side.Write(appendEdgeHead(nil, status, fields, cs, n)); err != nil {
		return
	}
	if req.Method != http.MethodHead {
		io.Copy(side, io.NewSectionReader(file, off, n))
	}
}

// edgePass relays one request to the origin and its response back, as
// the client asked (its own range, conditions and fields; an S3
// origin's request signed, with the client's conditions and range
// only). Nothing is stored.
func (s *Server) edgePass(o *edgeOrigin, req *http.Request, side net.Conn, cs string) {
	if o.s3 != nil && req.Method != http.MethodGet && req.Method != http.MethodHead {
		side.Write(appendEdgeHead(nil, http.StatusMethodNotAllowed, [][2]string{{"Allow", "GET, HEAD"}}, cs, 0))
		return
	}
	s.stats.EdgePasses.Add(1)
	path, rawQuery, hasQuery := strings.Cut(req.RequestURI, "?")
	var query *string
	if hasQuery {
		query = &rawQuery
	}
	ctx, cancel := context.WithCancel(s.edge.ctx)
	defer cancel()
	resp, err := o.do(ctx, req.Method, path, query, req.Host, o.passFields(req.Header))
	switch {
	case errors.Is(err, errNotObject):
		edgeError(side, http.StatusNotFound, cs, "no object here: the path names the bucket")
		return
	case err != nil && isTimeout(err):
		edgeError(side, http.StatusGatewayTimeout, cs, "the origin did not answer in time")
		return
	case err != nil:
		s.log.Warn("edge cache: the origin could not be asked", "route", o.r.Key, "path", path, "err", err)
		edgeError(side, http.StatusBadGateway, cs, "the origin could not be reached")
		return
	}
	edgeRelay(resp, side, cs)
}

// edgeRelay writes the origin's response to side, with Cache-Status cs
// first, and closes its body.
func edgeRelay(resp *http.Response, side net.Conn, cs string) {
	defer resp.Body.Close()
	theirs := resp.Header.Values("Cache-Status")
	resp.Header["Cache-Status"] = append([]string{cs + "; fwd-status=" + strconv.Itoa(resp.StatusCode)}, theirs...)
	resp.Write(side) // an error cuts the response short: the exchange resets the client's
}

// appendEdgeHead appends the head of a response the exchange reads from
// side: status, fields, Cache-Status cs first among any the fields
// carry (RFC 9211: the cache nearest the client first), the body's
// length (chunked when n < 0), and the close that ends it.
func appendEdgeHead(b []byte, status int, fields [][2]string, cs string, n int64, extra ...[2]string) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(append(append(b, ' '), http.StatusText(status)...), "\r\n"...)
	b = append(append(append(b, "Cache-Status: "...), cs...), "\r\n"...)
	for _, set := range [][][2]string{fields, extra} {
		for _, f := range set {
			b = append(append(append(append(b, f[0]...), ": "...), f[1]...), "\r\n"...)
		}
	}
	if n < 0 {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	} else {
		b = strconv.AppendInt(append(b, "Content-Length: "...), n, 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "Connection: close\r\n\r\n"...)
}

// edgeError answers with status and a line of text saying why.
func edgeError(w io.Writer, status int, cs, why string) {
	body := why + "\n"
	b := appendEdgeHead(nil, status, [][2]string{{"Content-Type", "text/plain; charset=utf-8"}}, cs, int64(len(body)))
	w.Write(append(b, body...))
}
