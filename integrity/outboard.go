package integrity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"lukechampine.com/blake3/bao"
	"lukechampine.com/blake3/guts"
)

// Outboard trees: a file's BLAKE3 tree without the file, in Bao's
// outboard format with chunk groups, so that any group of the file can be
// proven against the file's digest (the tree's root) on its own.
//
// The format, for a file of n bytes cut into groups of GroupSize bytes
// (the last one shorter):
//
//   - 8 bytes: n, unsigned little-endian;
//   - then, for every parent node of the tree in pre-order (a node, then
//     its left subtree, then its right subtree), the 32-byte chaining
//     values of its left and right children: 64 bytes per node, so
//     64 × (groups − 1) bytes in all. A file of at most one group has no
//     parent node: its outboard is the 8 bytes alone.
//
// A node covering len > GroupSize bytes splits them at the largest power
// of two below len (its left child); a node covering at most GroupSize
// bytes is a group, whose chaining value is BLAKE3's over those bytes as
// one subtree (chunk counter starting at the group's offset / 1024). The
// root node carries BLAKE3's ROOT flag, so the root's chaining value is the
// plain BLAKE3 of the file: b3sum's, and Repr-Digest's.

// OutboardRel is the link relation that names a file's outboard tree in
// the Link field of its responses.
const OutboardRel = "blake3-outboard"

// GroupLog is the size of the chunk groups of the outboard trees the
// engine writes and reads, as a power of two of BLAKE3's 1 KiB chunks.
const GroupLog = 8

// GroupSize is the size of a chunk group: 256 KiB. One group is what a
// client can check on its own, and so the least it fetches again when a
// check fails; the outboard costs 64 bytes per group (0.024% of the file:
// 25 MB for a 100 GB file). 16 KiB groups would cost 0.4% (2 GB of tree
// for a 500 GB file, fetched before the first byte is checked); 1 MiB
// groups would waste four times as much on every failed or interrupted
// piece.
const GroupSize = 1024 << GroupLog

// OutboardSize returns the length of the outboard tree of a file of size
// bytes.
func OutboardSize(size int64) int64 { return outboardSize(size, GroupLog) }

func outboardSize(size int64, group int) int64 {
	groups := Groups(size, group)
	if groups <= 1 {
		return 8
	}
	return 8 + 64*(groups-1)
}

// Groups returns how many chunk groups of 1 KiB << group bytes a file of
// size bytes has (0 for an empty file).
func Groups(size int64, group int) int64 {
	g := int64(1024) << group
	return (size + g - 1) / g
}

// SumOutboard reads n bytes of f from its start and returns their BLAKE3
// digest, with their outboard tree written to w (OutboardSize(n) bytes,
// written in no particular order, each byte once). Reading and hashing is
// one pass: the tree is what BLAKE3 computes anyway.
func SumOutboard(f io.ReaderAt, n int64, w io.WriterAt) (Digest, error) {
	return sumOutboard(f, n, w, GroupLog)
}

// SumOutboardTee is SumOutboard that also writes every byte read to tee
// (a SHA-256 hasher, say), in order: one read for every digest.
func SumOutboardTee(f io.ReaderAt, n int64, w io.WriterAt, tee io.Writer) (Digest, error) {
	return sumOutboardTee(f, n, w, tee, GroupLog)
}

func sumOutboard(f io.ReaderAt, n int64, w io.WriterAt, group int) (Digest, error) {
	return sumOutboardTee(f, n, w, nil, group)
}

func sumOutboardTee(f io.ReaderAt, n int64, w io.WriterAt, tee io.Writer, group int) (Digest, error) {
	pw := newPagedWriter(w, outboardSize(n, group))
	var r io.Reader = io.NewSectionReader(f, 0, n)
	if tee != nil {
		r = io.TeeReader(r, tee)
	}
	root, err := bao.Encode(pw, r, n, group, true)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: fewer than %d bytes", ErrShort, n)
	}
	if err == nil {
		err = pw.close()
	}
	return Digest(root), err
}

// pagedWriter gathers the outboard's scattered small writes (two 32-byte
// values per node, a parent after its subtrees) into pages, and writes a
// page to w once all of its bytes are there: a few syscalls per 64 KiB of
// tree instead of two per node, with only the pages still open held (the
// ancestors of the node being written: a few per level).
type pagedWriter struct {
	w     io.WriterAt
	size  int64
	pages map[int64]*page
	err   error
}

type page struct {
	buf    []byte
	filled int
}

const pageSize = 64 << 10

func newPagedWriter(w io.WriterAt, size int64) *pagedWriter {
	return &pagedWriter{w: w, size: size, pages: map[int64]*page{}}
}

func (p *pagedWriter) WriteAt(b []byte, off int64) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if off < 0 || off+int64(len(b)) > p.size {
		p.err = fmt.Errorf("integrity: outboard write at %d+%d past its size %d", off, len(b), p.size)
		return 0, p.err
	}
	n := len(b)
	for len(b) > 0 {
		idx := off / pageSize
		start := idx * pageSize
		pg := p.pages[idx]
		if pg == nil {
			pg = &page{buf: make([]byte, min(pageSize, p.size-start))}
			p.pages[idx] = pg
		}
		c := copy(pg.buf[off-start:], b)
		pg.filled += c
		b, off = b[c:], off+int64(c)
		if pg.filled == len(pg.buf) {
			delete(p.pages, idx)
			if _, err := p.w.WriteAt(pg.buf, start); err != nil {
				p.err = err
				return n - len(b), err
			}
		}
	}
	return n, nil
}

func (p *pagedWriter) close() error {
	if p.err == nil && len(p.pages) > 0 {
		p.err = fmt.Errorf("integrity: outboard incomplete: %d pages not filled", len(p.pages))
	}
	return p.err
}

// Errors of ParseOutboard and Outboard.Verify.
var (
	ErrOutboardMalformed = errors.New("integrity: outboard malformed")
	ErrOutboardRoot      = errors.New("integrity: outboard does not hash to the digest")
	ErrGroupMismatch     = errors.New("integrity: bytes do not match the outboard")
)

// Outboard is a file's outboard tree, checked against the file's digest:
// every node hashes to its parent and the top to the root. Its groups can
// then be checked one at a time, in any order, by any goroutine.
type Outboard struct {
	root  Digest
	size  int64
	group int
	tree  []byte
}

// ParseOutboard checks that b is the outboard tree (with chunk groups of
// GroupSize) of a size-byte file whose BLAKE3 digest is root. A negative
// size takes the size b states. A file of one group has no tree to check:
// its bytes are checked against root by Verify.
func ParseOutboard(b []byte, root Digest, size int64) (*Outboard, error) {
	return parseOutboard(b, root, size, GroupLog)
}

func parseOutboard(b []byte, root Digest, size int64, group int) (*Outboard, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than its 8-byte length", ErrOutboardMalformed, len(b))
	}
	stated := binary.LittleEndian.Uint64(b)
	if stated > 1<<62 || (size >= 0 && stated != uint64(size)) {
		return nil, fmt.Errorf("%w: states a %d-byte file, want %d", ErrOutboardMalformed, stated, size)
	}
	size = int64(stated)
	if want := outboardSize(size, group); int64(len(b)) != want {
		return nil, fmt.Errorf("%w: %d bytes, want %d for a %d-byte file in %d-byte groups", ErrOutboardMalformed, len(b), want, size, 1024<<group)
	}
	o := &Outboard{root: root, size: size, group: group, tree: b}
	if size == 0 {
		if root != emptyDigest {
			return nil, fmt.Errorf("%w: an empty file's digest is %s", ErrOutboardRoot, emptyDigest)
		}
		return o, nil
	}
	if !o.checkTree() {
		return nil, ErrOutboardRoot
	}
	return o, nil
}

// emptyDigest is the BLAKE3 of no bytes.
var emptyDigest = Digest{0xaf, 0x13, 0x49, 0xb9, 0xf5, 0xf9, 0xa1, 0xa6, 0xa0, 0x40, 0x4d, 0xea, 0x36, 0xdc, 0xc9, 0x49,
	0x9b, 0xcb, 0x25, 0xc9, 0xad, 0xc1, 0x12, 0xb7, 0xcc, 0x9a, 0x93, 0xca, 0xe4, 0x1f, 0x32, 0x62}

// checkTree walks every parent node in pre-order and checks that its two
// children hash to it (the root with BLAKE3's ROOT flag). The groups
// themselves are checked when their bytes arrive.
func (o *Outboard) checkTree() bool {
	groupSize := int64(1024) << o.group
	pos := 8
	var rec func(cv [8]uint32, n int64, flags uint32) bool
	rec = func(cv [8]uint32, n int64, flags uint32) bool {
		if n <= groupSize {
			return true
		}
		l, r := bytesToCV(o.tree[pos:]), bytesToCV(o.tree[pos+32:])
		pos += 64
		if guts.ChainingValue(guts.ParentNode(l, r, &guts.IV, flags)) != cv {
			return false
		}
		mid := int64(1) << (bits.Len64(uint64(n-1)) - 1)
		return rec(l, mid, 0) && rec(r, n-mid, 0)
	}
	return rec(bytesToCV(o.root[:]), o.size, guts.FlagRoot) && pos == len(o.tree)
}

func bytesToCV(b []byte) (cv [8]uint32) {
	for i := range cv {
		cv[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return cv
}

// Size is the file's size.
func (o *Outboard) Size() int64 { return o.size }

// Root is the file's digest.
func (o *Outboard) Root() Digest { return o.root }

// Groups is the number of chunk groups of the file.
func (o *Outboard) Groups() int64 { return Groups(o.size, o.group) }

// GroupSize is the size of every group but the last.
func (o *Outboard) GroupSize() int64 { return int64(1024) << o.group }

// Group returns the offset and length of group i.
func (o *Outboard) Group(i int64) (off, n int64) {
	off = i * o.GroupSize()
	return off, min(o.GroupSize(), o.size-off)
}

// Verify checks that data is group i of the file, byte for byte.
func (o *Outboard) Verify(i int64, data []byte) error {
	if i < 0 || i >= o.Groups() {
		return fmt.Errorf("integrity: group %d of %d", i, o.Groups())
	}
	off, n := o.Group(i)
	if int64(len(data)) != n {
		return fmt.Errorf("%w: group %d has %d bytes, want %d", ErrGroupMismatch, i, len(data), n)
	}
	if !bao.VerifyChunk(data, o.tree, o.group, uint64(off), o.root) {
		return fmt.Errorf("%w: group %d (bytes %d-%d)", ErrGroupMismatch, i, off, off+n-1)
	}
	return nil
}
