package files

import "bytes"

// Coding is a precompressed sidecar: file.br beside file, and so on.
type Coding struct {
	Name   string // Content-Encoding token
	Suffix string // appended to the file name
}

// Codings lists the sidecars in the server's order of preference, used to
// break ties between equal q-values.
var Codings = [...]Coding{{"br", ".br"}, {"zstd", ".zst"}, {"gzip", ".gz"}}

// acceptQ returns the q-value (0 to 1000) the Accept-Encoding value ae
// gives coding, honouring "*" (RFC 9110 §12.5.3). A missing header accepts
// nothing but identity here: sidecars are only sent to clients that ask.
func acceptQ(ae []byte, coding string) int {
	star := -1
	for len(ae) > 0 {
		var item []byte
		if i := bytes.IndexByte(ae, ','); i >= 0 {
			item, ae = ae[:i], ae[i+1:]
		} else {
			item, ae = ae, nil
		}
		name, params := item, []byte(nil)
		if i := bytes.IndexByte(item, ';'); i >= 0 {
			name, params = item[:i], item[i+1:]
		}
		name = trimOWS(name)
		q := parseQ(params)
		switch {
		case bytes.EqualFold(name, []byte(coding)),
			coding == "gzip" && bytes.EqualFold(name, []byte("x-gzip")):
			return q
		case len(name) == 1 && name[0] == '*':
			star = q
		}
	}
	if star >= 0 {
		return star
	}
	return 0
}

// parseQ reads a "q=0.5" weight from parameters; 1000 when absent,
// 0 when malformed.
func parseQ(params []byte) int {
	for len(params) > 0 {
		var p []byte
		if i := bytes.IndexByte(params, ';'); i >= 0 {
			p, params = params[:i], params[i+1:]
		} else {
			p, params = params, nil
		}
		p = trimOWS(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		v := p[2:]
		// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
		if len(v) == 0 || (v[0] != '0' && v[0] != '1') {
			return 0
		}
		q := int(v[0]-'0') * 1000
		if len(v) > 1 {
			if v[1] != '.' || len(v) > 5 {
				return 0
			}
			mult := 100
			for _, c := range v[2:] {
				if c < '0' || c > '9' {
					return 0
				}
				q += int(c-'0') * mult
				mult /= 10
			}
		}
		return min(q, 1000)
	}
	return 1000
}
