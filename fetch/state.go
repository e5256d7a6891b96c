package fetch

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mediaship/engine/integrity"
)

// The state file, PATH.part.state, records which groups of PATH.part were
// checked and written, for --resume. A text file, replaced whole:
//
//	engine-fetch-state 1
//	size <bytes>
//	blake3 <hex root>
//	group <group size>
//	verified <base64 of a bitmap, bit i (LSB first) for group i>
//
// A group's bit is set only after the part file was flushed to disk with
// the group in it; a group written but not yet recorded is checked again
// on resume.

const stateMagic = "engine-fetch-state 1"

// ErrStateMismatch means the state file is for another file: another
// size, digest or group size.
var ErrStateMismatch = errors.New("fetch: the state file describes another file")

type state struct {
	size   int64
	root   integrity.Digest
	group  int64
	groups int64
	done   []byte // bitmap of verified groups
}

func newState(size int64, root integrity.Digest, group, groups int64) *state {
	return &state{size: size, root: root, group: group, groups: groups, done: make([]byte, (groups+7)/8)}
}

func (st *state) has(i int64) bool { return st.done[i/8]&(1<<(i%8)) != 0 }
func (st *state) set(i int64)      { st.done[i/8] |= 1 << (i % 8) }
func (st *state) clear(i int64)    { st.done[i/8] &^= 1 << (i % 8) }

func (st *state) count() int64 {
	var n int64
	for _, b := range st.done {
		for ; b != 0; b &= b - 1 {
			n++
		}
	}
	return n
}

// save writes the state to path whole (writeFileSync: a temporary file,
// flushed, renamed over it) with done as its bitmap.
func (st *state) save(path string, done []byte) error {
	b := fmt.Appendf(nil, "%s\nsize %d\nblake3 %s\ngroup %d\nverified %s\n", stateMagic, st.size, st.root, st.group, base64.StdEncoding.EncodeToString(done))
	return writeFileSync(path, b)
}

// loadState reads a state file and checks it describes want's file.
func loadState(path string, want *state) (*state, error) {
	// Its size is known: the header and the bitmap in base64. A larger
	// file is not read whole.
	b, err := readNoFollow(path, 256+int64(base64.StdEncoding.EncodedLen(len(want.done))))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 5 || lines[0] != stateMagic {
		return nil, fmt.Errorf("fetch: %s: not a state file of this version", path)
	}
	field := func(i int, key string) string {
		v, ok := strings.CutPrefix(lines[i], key+" ")
		if !ok {
			return "\x00"
		}
		return v
	}
	st := &state{}
	size, err1 := strconv.ParseInt(field(1, "size"), 10, 64)
	root, err2 := integrity.ParseHex(field(2, "blake3"))
	group, err3 := strconv.ParseInt(field(3, "group"), 10, 64)
	done, err4 := base64.StdEncoding.DecodeString(field(4, "verified"))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("fetch: %s: malformed: %v", path, err)
	}
	st.size, st.root, st.group, st.groups, st.done = size, root, group, want.groups, done
	if st.size != want.size || st.root != want.root || st.group != want.group || len(st.done) != len(want.done) {
		return nil, fmt.Errorf("%w (%s: %d bytes, blake3 %s, groups of %d; now %d bytes, blake3 %s, groups of %d)",
			ErrStateMismatch, path, st.size, st.root, st.group, want.size, want.root, want.group)
	}
	if r := want.groups % 8; r != 0 {
		st.done[len(st.done)-1] &= 1<<r - 1 // no group past the last
	}
	return st, nil
}
