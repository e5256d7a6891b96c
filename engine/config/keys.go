package config

import (
	"errors"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines maps every key path in a TOML document to the line it is
// written on. Array tables get an index: the second [[sites]] table's
// root is "sites[1].root". A syntax error comes back as a *toml.DecodeError
// so it is reported like the decoder's own.
func keyLines(data []byte) (lines map[string]int, err error) {
	defer func() {
		// The unstable parser is not promised to be panic-free on every
		// input; a panic here must not take down config loading.
		if r := recover(); r != nil {
			err = errors.New("config syntax: unreadable TOML")
		}
	}()
	lines = map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	arrays := map[string]int{} // array table path -> count so far
	table := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			name, line := keyPath(&p, e)
			if e.Kind == unstable.ArrayTable {
				arrays[name]++
			}
			table = withIndexes(name, arrays)
			if _, seen := lines[table]; !seen {
				lines[table] = line
			}
		case unstable.KeyValue:
			name, line := keyPath(&p, e)
			full := join(table, name)
			lines[full] = line
			addInline(&p, e.Value(), full, lines)
		}
	}
	if perr := p.Error(); perr != nil {
		var pe *unstable.ParserError
		if errors.As(perr, &pe) {
			// Let the real decoder produce its positioned error.
			var v map[string]any
			if derr := toml.Unmarshal(data, &v); derr != nil {
				return lines, derr
			}
		}
		return lines, perr
	}
	return lines, nil
}

// addInline records the keys of an inline table value.
func addInline(p *unstable.Parser, v *unstable.Node, prefix string, lines map[string]int) {
	if v == nil || v.Kind != unstable.InlineTable {
		return
	}
	it := v.Children()
	for it.Next() {
		kv := it.Node()
		if kv.Kind != unstable.KeyValue {
			continue
		}
		name, line := keyPath(p, kv)
		full := join(prefix, name)
		lines[full] = line
		addInline(p, kv.Value(), full, lines)
	}
}

// keyPath returns the dotted key of a table header or key-value and its line.
func keyPath(p *unstable.Parser, n *unstable.Node) (string, int) {
	var parts []string
	line := 0
	it := n.Key()
	for it.Next() {
		k := it.Node()
		parts = append(parts, string(k.Data))
		if line == 0 {
			line = p.Shape(p.Range(k.Data)).Start.Line
		}
	}
	return strings.Join(parts, "."), line
}

// withIndexes rewrites "sites.tls" as "sites[N].tls" where sites is an
// array table whose latest entry is N.
func withIndexes(name string, arrays map[string]int) string {
	parts := strings.Split(name, ".")
	out := make([]string, 0, len(parts))
	prefix := ""
	for _, part := range parts {
		prefix = join(prefix, part)
		if n, ok := arrays[prefix]; ok && n > 0 {
			part += "[" + strconv.Itoa(n-1) + "]"
		}
		out = append(out, part)
	}
	return strings.Join(out, ".")
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}
