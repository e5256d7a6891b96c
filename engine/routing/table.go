package routing

import (
	"strings"

	"github.com/mediaship/engine/internal/httpsyntax"
)

// Table maps host names to values by the names they were added under:
// exact names, "*.suffix" wildcards and "*".
//
// Invariants: names are kept normalized (Normalize); wildcards are
// ordered longest suffix first, so the first that matches is the most
// specific; the first value added under a name stays. A Table is built
// once and then only read, from any goroutine.
type Table[V any] struct {
	exact  map[string]V
	wild   []wildcard[V]
	any    V
	hasAny bool
}

type wildcard[V any] struct {
	suffix string // ".example.com" for "*.example.com"
	v      V
}

// Add gives name ("a.example.com", "*.example.com" or "*", any case, a
// trailing dot allowed) the value v. It reports false, and changes
// nothing, when the name has a value already.
func (t *Table[V]) Add(name string, v V) bool {
	name = Normalize(name)
	switch {
	case name == "*":
		if t.hasAny {
			return false
		}
		t.any, t.hasAny = v, true
	case strings.HasPrefix(name, "*."):
		suffix := name[1:]
		i := 0
		for ; i < len(t.wild) && len(t.wild[i].suffix) >= len(suffix); i++ {
			if t.wild[i].suffix == suffix {
				return false
			}
		}
		t.wild = append(t.wild, wildcard[V]{})
		copy(t.wild[i+1:], t.wild[i:])
		t.wild[i] = wildcard[V]{suffix: suffix, v: v}
	default:
		if _, ok := t.exact[name]; ok {
			return false
		}
		if t.exact == nil {
			t.exact = map[string]V{}
		}
		t.exact[name] = v
	}
	return true
}

// Rank is how specifically a table names a name: not at all, by "*",
// by a wildcard (the longer its suffix, the higher), or exactly. Ranks
// of one name in different tables compare: the most specific wins.
type Rank int

const (
	RankNone  Rank = 0
	RankAny   Rank = 1 // "*"
	RankExact Rank = 1 << 30
)

// Match returns the value for a normalized name: its exact name's, else
// the longest matching wildcard's, else "*"'s, with the rank it matched
// by; RankNone when none matches.
func (t *Table[V]) Match(name []byte) (v V, r Rank) {
	if v, ok := t.exact[string(name)]; ok {
		return v, RankExact
	}
	for _, w := range t.wild {
		if len(name) > len(w.suffix) && string(name[len(name)-len(w.suffix):]) == w.suffix {
			return w.v, RankAny + Rank(len(w.suffix))
		}
	}
	if t.hasAny {
		return t.any, RankAny
	}
	return v, RankNone
}

// Lookup is Match without the rank: ok is false when nothing matches.
func (t *Table[V]) Lookup(name []byte) (v V, ok bool) {
	v, r := t.Match(name)
	return v, r != RankNone
}

// LookupString is Lookup for a name held as a string.
func (t *Table[V]) LookupString(name string) (v V, ok bool) {
	v, r := t.MatchString(name)
	return v, r != RankNone
}

// MatchString is Match for a name held as a string.
func (t *Table[V]) MatchString(name string) (v V, r Rank) {
	if v, ok := t.exact[name]; ok {
		return v, RankExact
	}
	for _, w := range t.wild {
		if len(name) > len(w.suffix) && strings.HasSuffix(name, w.suffix) {
			return w.v, RankAny + Rank(len(w.suffix))
		}
	}
	if t.hasAny {
		return t.any, RankAny
	}
	return v, RankNone
}

// Names reports whether a normalized name is given by its exact name or
// a wildcard: "*" names nothing.
func (t *Table[V]) Names(name string) bool {
	_, r := t.MatchString(name)
	return r > RankAny
}

// Any returns "*"'s value, if one was added.
func (t *Table[V]) Any() (v V, ok bool) { return t.any, t.hasAny }

// Len is the number of names added.
func (t *Table[V]) Len() int {
	n := len(t.exact) + len(t.wild)
	if t.hasAny {
		n++
	}
	return n
}

// Normalize is a name as tables keep it: lowercase, without a trailing
// dot (httpsyntax.NormalizeName).
func Normalize(name string) string { return httpsyntax.NormalizeName(name) }

// AppendHost is httpsyntax.AppendHost: a Host value as a name to look up.
func AppendHost(buf, host []byte) []byte { return httpsyntax.AppendHost(buf, host) }
