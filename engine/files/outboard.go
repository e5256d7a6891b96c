package files

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"

	"github.com/mediaship/engine/integrity"
)

// Outboard trees (integrity.SumOutboard) are served at a file's path +
// OutboardSuffix, from Config.Outboards where the digest store writes them,
// named by the file's digest. The engine's own tree always answers for a
// file it serves, even where a sidecar of that name lies beside the file:
// a sidecar written before the file last changed would prove nothing.

// OutboardSuffix is added to a file's path to name its outboard tree.
const OutboardSuffix = integrity.OutboardSidecar

// OutboardName is the name of the tree of the file whose digest is sum,
// in Config.Outboards.
func OutboardName(sum [32]byte) string { return hex.EncodeToString(sum[:]) + OutboardSuffix }

// outboardBase returns the path of the file whose tree rel names, when it
// may name one.
func outboardBase(rel []byte) ([]byte, bool) {
	base, ok := bytes.CutSuffix(rel, []byte(OutboardSuffix))
	return base, ok && len(base) > 0 && base[len(base)-1] != '/'
}

// serveOutboard answers a request for the outboard tree of base, a file.
func (c *Cache) serveOutboard(req *Request, s *Scratch, base *Entry) bool {
	r := &s.Resp
	dg := base.Digest()
	switch {
	case dg == nil: // its tree is written when it is hashed
		ErrorResponse(r, 503)
		r.NeedDigest, r.RetryAfter = base, retryAfter(base.Size)
		return true
	case dg.Corrupt:
		ErrorResponse(r, 500)
		r.Err = errCorrupt
		return true
	}
	if base.Size <= integrity.GroupSize {
		// One group: the tree is the file's size alone, never stored.
		return c.serveFile(c.outboardSite, req, s, nil, smallOutboard(base.Size))
	}
	s.tmp = append(s.tmp[:0], OutboardName(dg.Sum)...)
	ob := s.lookup(c, c.cfg.Outboards, s.tmp)
	if ob == nil {
		return false
	}
	if ob.Kind != KindFile || ob.Size != integrity.OutboardSize(base.Size) {
		// Not written yet, removed, or cut short: write it again.
		ErrorResponse(r, 503)
		r.NeedTree, r.RetryAfter = base, retryAfter(base.Size)
		return true
	}
	done := c.serveFile(c.outboardSite, req, s, s.tmp, ob)
	if r.NeedDigest == ob {
		r.DigestRoot = c.cfg.Outboards
	}
	return done
}

// smallOutboard is the tree of a file of at most one group: its size as
// 8 little-endian bytes.
func smallOutboard(size int64) *Entry {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(size))
	sum, _, _ := integrity.Sum(bytes.NewReader(b))
	e := &Entry{Kind: KindFile, Size: 8, Small: b, fd: -1, ContentType: "application/octet-stream", ETag: sum.ETag()}
	e.digest.Store(&Digest{Sum: sum, ETag: sum.ETag(), Header: sum.HeaderValue()})
	return e
}

// appendOutboardLink appends the Link field value pointing at the tree of
// the file at rel (a cleaned path without its leading slash).
func appendOutboardLink(b []byte, rel []byte) []byte {
	b = append(b, "</"...)
	b = AppendPathEscaped(b, string(rel), true)
	b = append(b, OutboardSuffix+`>; rel="`+integrity.OutboardRel+`"`...)
	return b
}
