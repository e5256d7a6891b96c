// Package peershare counts what each client address holds (connections,
// sessions, upstream exchanges) across every worker and transport, so that
// one address cannot take more than its share of a server-wide resource.
//
// An IPv6 client usually owns a whole /64, so IPv6 addresses are counted
// by prefix (64 bits unless told otherwise); IPv4 addresses, and IPv4
// mapped into IPv6, by the address. Addresses in the exempt prefixes (a
// load balancer carrying many clients) are not counted at all.
//
// The invariant: every Acquire that succeeded is matched by exactly one
// Release of the key it returned.
package peershare

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Table counts holdings per client address. Safe for concurrent use: the
// loops of every worker, QUIC's goroutines and handlers share one.
type Table struct {
	// Immutable after construction.
	limit  int
	v6Bits int
	exempt []netip.Prefix
	seed   maphash.Seed

	refused atomic.Int64
	shards  [64]shard
}

type shard struct {
	mu sync.Mutex
	n  map[netip.Addr]int32 // guarded by mu; only keys held at least once
	_  [40]byte             // keeps shards on separate cache lines
}

// New is a table that lets each address hold limit at most (0: no
// limit, counting still done), IPv6 addresses counted by their first
// v6Bits bits (0 means 64), exempt addresses not counted.
func New(limit, v6Bits int, exempt []netip.Prefix) *Table {
	if v6Bits <= 0 || v6Bits > 128 {
		v6Bits = 64
	}
	t := &Table{limit: limit, v6Bits: v6Bits, exempt: exempt, seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].n = map[netip.Addr]int32{}
	}
	return t
}

// Limit is what one address may hold; 0 means no limit.
func (t *Table) Limit() int { return t.limit }

// Key is the address a is counted under: the zero Addr for an exempt
// or invalid one, its /v6Bits prefix for IPv6, itself for IPv4.
func (t *Table) Key(a netip.Addr) netip.Addr {
	if !a.IsValid() {
		return netip.Addr{}
	}
	a = a.Unmap().WithZone("")
	for _, p := range t.exempt {
		if p.Contains(a) {
			return netip.Addr{}
		}
	}
	if a.Is6() {
		p, err := a.Prefix(t.v6Bits)
		if err != nil {
			return a
		}
		return p.Addr()
	}
	return a
}

// Acquire counts one more holding for a, unless a's key already holds the
// limit: then ok is false and nothing is counted. key is what Release
// takes; the zero Addr (exempt, never counted) is released as a no-op.
func (t *Table) Acquire(a netip.Addr) (key netip.Addr, ok bool) {
	key = t.Key(a)
	if !key.IsValid() {
		return key, true
	}
	s := t.shard(key)
	s.mu.Lock()
	n := s.n[key]
	if t.limit > 0 && int(n) >= t.limit {
		s.mu.Unlock()
		t.refused.Add(1)
		return netip.Addr{}, false
	}
	s.n[key] = n + 1
	s.mu.Unlock()
	return key, true
}

// Release ends one holding Acquire counted under key.
func (t *Table) Release(key netip.Addr) {
	if !key.IsValid() {
		return
	}
	s := t.shard(key)
	s.mu.Lock()
	if n := s.n[key] - 1; n > 0 {
		s.n[key] = n
	} else {
		delete(s.n, key)
	}
	s.mu.Unlock()
}

// Held is what a's key holds now.
func (t *Table) Held(a netip.Addr) int { return t.HeldKey(t.Key(a)) }

// HeldKey is what key (as Key or Acquire returned it) holds now.
func (t *Table) HeldKey(key netip.Addr) int {
	if !key.IsValid() {
		return 0
	}
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.n[key])
}

// Refused is how many Acquires were refused.
func (t *Table) Refused() int64 { return t.refused.Load() }

// Addresses is how many keys hold something now.
func (t *Table) Addresses() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.n)
		s.mu.Unlock()
	}
	return n
}

func (t *Table) shard(key netip.Addr) *shard {
	return &t.shards[maphash.Comparable(t.seed, key)%uint64(len(t.shards))]
}
