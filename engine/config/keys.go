package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines maps every key path in a TOML document to the line it is
// written on. Array tables get an index: the second [[sites]] table's
// root is "sites[1].root". A syntax error comes back as a *toml.DecodeError
// so it is reported like the decoder's own.
//
// A value of a list-of-strings key that is not a list of strings (a
// nested list, an inline table) comes back as a *shapeError naming the
// key and its line: go-toml reports those at the wrong place.
func keyLines(data []byte) (lines map[string]int, err error) {
	var shapeErr *shapeError
	defer func() {
		if err == nil && shapeErr != nil {
			err = shapeErr
		}
	}()
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
			if shapeErr == nil && !shapeOK(full, e.Value()) {
				shapeErr = &shapeError{key: full, line: line}
			}
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

// shapeError is a value of the wrong shape for its key, found before
// decoding.
type shapeError struct {
	key  string
	line int
}

func (e *shapeError) Error() string { return e.key + ": wrong type" }

// shapeOK reports whether v may be the value of key: anything, unless
// key is a list of strings, which v must then be, or a Grace, a string.
func shapeOK(key string, v *unstable.Node) bool {
	t, ok := fieldFor(strings.Split(key, "."))
	if ok && t == reflect.TypeFor[Grace]() && v != nil {
		return v.Kind == unstable.String // go-toml hands Grace a number's text, and its error no position
	}
	if !ok || t.Kind() != reflect.Slice || t.Elem().Kind() != reflect.String || v == nil {
		return true
	}
	if v.Kind != unstable.Array {
		return v.Kind == unstable.String // go-toml's own message is right for the rest
	}
	it := v.Children()
	for it.Next() {
		if it.Node().Kind != unstable.String {
			return false
		}
	}
	return true
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

// fieldFor walks Config's TOML tags along a key path ("sites[0].tls.cert"
// or a go-toml Key) and returns the field type it ends at.
func fieldFor(parts []string) (reflect.Type, bool) {
	t := reflect.TypeFor[Config]()
	for _, p := range parts {
		if i := strings.IndexByte(p, '['); i >= 0 {
			p = p[:i]
		}
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		found := false
		for _, f := range tomlFields(t) {
			if strings.Split(f.Tag.Get("toml"), ",")[0] == p {
				t, found = f.Type, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return t, true
}

// tomlFields lists struct type t's fields as TOML sees them: the fields
// of an embedded struct without a tag (Route's Policy) as its own.
func tomlFields(t reflect.Type) []reflect.StructField {
	var fs []reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("toml") == "" && f.Type.Kind() == reflect.Struct {
			fs = append(fs, tomlFields(f.Type)...)
			continue
		}
		fs = append(fs, f)
	}
	return fs
}

// expectedKeys lists the keys valid in the table that holds key.
func expectedKeys(key []string) string {
	if len(key) == 0 {
		return "check the spelling"
	}
	t, ok := fieldFor(key[:len(key)-1])
	if !ok {
		return "check the spelling"
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return "check the spelling"
	}
	var names []string
	for _, f := range tomlFields(t) {
		if n := strings.Split(f.Tag.Get("toml"), ",")[0]; n != "" && n != "-" {
			names = append(names, n)
		}
	}
	where := "at the top level"
	if len(key) > 1 {
		where = "in [" + strings.Join(key[:len(key)-1], ".") + "]"
	}
	return "expected one of " + strings.Join(names, ", ") + " " + where
}

// expectedType describes in words what the key at path holds.
func expectedType(path string) string {
	t, ok := fieldFor(strings.Split(path, "."))
	if !ok {
		return ""
	}
	switch t {
	case reflect.TypeFor[Size](), reflect.TypeFor[*Size]():
		return "a size such as \"64KiB\" or \"1MiB\""
	case reflect.TypeFor[Duration]():
		return "a duration such as \"30s\""
	case reflect.TypeFor[Grace]():
		return "a duration such as \"30s\", or \"until done\""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.String:
		return "a string in quotes"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings in quotes, such as [\"a\", \"b\"]"
		}
		return "a list of tables ([[" + path + "]])"
	case reflect.Struct:
		return "a table ([" + path + "])"
	}
	return ""
}
