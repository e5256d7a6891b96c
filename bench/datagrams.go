package bench

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/mediaship/engine/wt"
)

// Datagram accounting for WebTransport sessions in mode=datagrams
// (docs/WEBTRANSPORT.md): the server sends datagrams 0 … count−1, each
// its sequence number as 8 bytes big-endian and then pattern bytes
// seq × 65536 + i, and afterwards a line "<sent> <payload bytes each>" on
// a stream. Datagrams are unreliable, so a lost one is a figure, never a
// failure; a wrong one (bad sequence number, size or byte) and a repeated
// one are failures: QUIC delivers a datagram once or not at all.

// dgSeqStride is how far apart two datagrams' pattern offsets are.
const dgSeqStride = 65536

// dgTally judges one session's datagrams as they arrive. It is reused
// from session to session by one worker (its bitmap is kept).
type dgTally struct {
	count   int64    // the datagrams asked for
	maxSize int      // the size the 200 announced (Engine-Datagram-Bytes)
	seen    []uint64 // bit seq is set once datagram seq arrived right

	unique, dups, corrupt int64
	firstBad              string // the first failure, for the log
}

// reset starts a session that asked for count datagrams of at most
// maxSize bytes.
func (d *dgTally) reset(count int64, maxSize int) {
	words := int((count + 63) / 64)
	if cap(d.seen) < words {
		d.seen = make([]uint64, words)
	}
	d.seen = d.seen[:words]
	clear(d.seen)
	d.count, d.maxSize = count, maxSize
	d.unique, d.dups, d.corrupt, d.firstBad = 0, 0, 0, ""
}

// add judges one datagram and reports whether it is a right one seen for
// the first time.
func (d *dgTally) add(b []byte) bool {
	bad := func(format string, args ...any) bool {
		d.corrupt++
		if d.firstBad == "" {
			d.firstBad = fmt.Sprintf(format, args...)
		}
		return false
	}
	if len(b) < 16 || len(b) > d.maxSize {
		return bad("a datagram of %d bytes (16 to %d expected)", len(b), d.maxSize)
	}
	seq := binary.BigEndian.Uint64(b)
	if seq >= uint64(d.count) {
		return bad("datagram sequence number %d of %d", seq, d.count)
	}
	if i := wt.CheckPattern(b[8:], int64(seq)*dgSeqStride+8); i >= 0 {
		return bad("datagram %d: byte %d is wrong", seq, 8+i)
	}
	w, bit := seq/64, uint64(1)<<(seq%64)
	if d.seen[w]&bit != 0 {
		d.dups++
		if d.firstBad == "" {
			d.firstBad = fmt.Sprintf("datagram %d arrived twice", seq)
		}
		return false
	}
	d.seen[w] |= bit
	d.unique++
	return true
}

// complete says every datagram asked for has arrived.
func (d *dgTally) complete() bool { return d.unique == d.count }

// kind is the session's failure for its datagrams: "" when every one
// that arrived was right and arrived once (however many were lost).
func (d *dgTally) kind() string {
	switch {
	case d.corrupt > 0:
		return "datagram-corrupt"
	case d.dups > 0:
		return "datagram-duplicate"
	}
	return ""
}

// counts is the session's figures, with sent from the server's line (-1
// when it never came).
func (d *dgTally) counts(sent int64) dgCounts {
	return dgCounts{expected: d.count, sent: sent, received: d.unique, dups: d.dups, corrupt: d.corrupt}
}

// parseDatagramLine reads the server's "<sent> <payload bytes each>\n"
// line. sent may not exceed count, nor the size the announced one.
func parseDatagramLine(line string, count int64, maxSize int) (sent int64, size int, err error) {
	f := strings.Fields(strings.TrimSuffix(line, "\n"))
	if len(f) != 2 || !strings.HasSuffix(line, "\n") {
		return 0, 0, fmt.Errorf("datagrams line %q: expected \"<sent> <bytes each>\\n\"", line)
	}
	sent, err1 := strconv.ParseInt(f[0], 10, 64)
	size, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || sent < 0 || sent > count || size < 16 || size > maxSize {
		return 0, 0, fmt.Errorf("datagrams line %q: sent 0 to %d and 16 to %d bytes each expected", line, count, maxSize)
	}
	return sent, size, nil
}

// dgCounts adds up datagrams over sessions (a sample's, a run's).
type dgCounts struct {
	expected, sent, received, dups, corrupt int64
}

func (a *dgCounts) add(b dgCounts) {
	a.expected += b.expected
	a.sent += max(b.sent, 0)
	a.received += b.received
	a.dups += b.dups
	a.corrupt += b.corrupt
}

// DatagramCounts is what the datagram sessions of a sample (or of the
// accepted samples) received against what they asked for.
type DatagramCounts struct {
	Expected int64 `json:"expected"` // asked for: count of each session
	Sent     int64 `json:"sent"`     // by the servers' own lines
	Received int64 `json:"received"` // right, each once
	// Lost is Expected − Received: never sent, lost on the way, or
	// dropped by a full receive queue (quic-go keeps 128 for a
	// connection, HTTP/3 32 for a session); Sent tells the first apart.
	Lost        int64   `json:"lost"`
	LossPercent float64 `json:"loss_percent"`
	Duplicates  int64   `json:"duplicates"` // each rejects its sample
	Corrupt     int64   `json:"corrupt"`    // each rejects its sample
}

func (a dgCounts) public() *DatagramCounts {
	r := &DatagramCounts{Expected: a.expected, Sent: a.sent, Received: a.received, Lost: a.expected - a.received,
		Duplicates: a.dups, Corrupt: a.corrupt}
	if a.expected > 0 {
		r.LossPercent = 100 * float64(r.Lost) / float64(a.expected)
	}
	return r
}
