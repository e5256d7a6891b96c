package h2

// Priority is an RFC 9218 priority: urgency 0 (highest) to 7, and whether
// the response is processed incrementally.
type Priority struct {
	Urgency     uint8
	Incremental bool
}

// DefaultPriority is what a request without a priority signal gets
// (RFC 9218 §4: u=3, non-incremental).
var DefaultPriority = Priority{Urgency: 3}

// ParsePriority reads a Priority field value (an RFC 8941 dictionary) over
// base: "u=N" and "i" (or "i=?1"/"i=?0") change it, unknown keys and
// out-of-range values are ignored (RFC 9218 §4). A value that is not a
// dictionary leaves base unchanged.
func ParsePriority(v []byte, base Priority) Priority {
	p := base
	for len(v) > 0 {
		v = trimOWS(v)
		// key: lcalpha or "*", then lcalpha / DIGIT / "_" / "-" / "." / "*"
		k := 0
		for k < len(v) && isKeyChar(v[k], k == 0) {
			k++
		}
		if k == 0 {
			return base
		}
		key := v[:k]
		v = v[k:]
		val := []byte(nil)
		if len(v) > 0 && v[0] == '=' {
			v = v[1:]
			e := 0
			for e < len(v) && v[e] != ',' && v[e] != ';' {
				e++
			}
			val = trimOWS(v[:e])
			v = v[e:]
		}
		for len(v) > 0 && v[0] == ';' { // parameters: skipped
			e := 1
			for e < len(v) && v[e] != ',' && v[e] != ';' {
				e++
			}
			v = v[e:]
		}
		v = trimOWS(v)
		if len(v) > 0 {
			if v[0] != ',' {
				return base
			}
			v = v[1:]
			if len(trimOWS(v)) == 0 {
				return base // trailing comma
			}
		}
		switch string(key) {
		case "u":
			if len(val) == 1 && val[0] >= '0' && val[0] <= '7' {
				p.Urgency = val[0] - '0'
			}
		case "i":
			switch string(val) {
			case "", "?1":
				p.Incremental = true
			case "?0":
				p.Incremental = false
			}
		}
	}
	return p
}

func isKeyChar(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c == '*':
		return true
	case first:
		return false
	case c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		return true
	}
	return false
}

func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}
