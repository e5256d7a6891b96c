package files

import (
	"bytes"
	"strings"
)

// Coding is a precompressed sidecar: file.br beside file, and so on.
type Coding struct {
	Name   string // Content-Encoding token
	Suffix string // appended to the file name
}

// Codings lists the sidecars in the server's order of preference, used to
// break ties between equal q-values.
var Codings = [...]Coding{{"br", ".br"}, {"zstd", ".zst"}, {"gzip", ".gz"}}

// SidecarOf returns the name of the file that name would be a sidecar
// of ("app.js" for "app.js.br"), and false when name has no sidecar
// suffix or nothing before it.
func SidecarOf(name string) (string, bool) {
	for _, cd := range Codings {
		if base, ok := strings.CutSuffix(name, cd.Suffix); ok && base != "" && !strings.HasSuffix(base, "/") {
			return base, true
		}
	}
	return "", false
}

// The names engine precompress writes a sidecar under before renaming it:
// a partial sidecar, never served (404).
const (
	PrecompressTempPrefix = ".precompress-"
	PrecompressTempSuffix = ".tmp"
)

// isPrecompressTemp reports whether rel's last segment is such a name.
func isPrecompressTemp(rel []byte) bool {
	name := rel
	if i := bytes.LastIndexByte(rel, '/'); i >= 0 {
		name = rel[i+1:]
	}
	return bytes.HasPrefix(name, []byte(PrecompressTempPrefix)) && bytes.HasSuffix(name, []byte(PrecompressTempSuffix))
}

// A sidecar is served only when it is a regular file with its file's
// mtime exactly, as engine precompress, gzip -k, brotli and zstd leave
// it: one older was made from an earlier version of the file, and one
// newer may be too (a file put back with an older mtime by a rollback,
// rsync -t or cp -p). nginx's gzip_static serves any; here a sidecar that
// may not match is skipped and the file itself is served.
func freshSidecar(e, side *Entry) bool {
	return side.Kind == KindFile && side.ModTime.Equal(e.ModTime)
}

// usableSidecar reports whether site may serve side for e.
func usableSidecar(site *Site, e, side *Entry) bool {
	return freshSidecar(e, side) && !(site.HideDotfiles && side.viaHidden)
}

// Bits of Entry.sidecars: which sidecars were usable when looked up, and
// which of those resolved through a hidden path (a site with
// HideDotfiles may not serve them; sites sharing a root differ there).
const (
	sidecarsKnown     = 1 << 16
	sidecarHiddenBits = 8
)

// sidecars returns a bit per Codings index for each sidecar of e that
// site may serve, or false when some must be opened first (s.Pending()).
//
// The answer is kept on e, so a file's later requests need no lookup of
// its sidecars: a file without any costs one atomic load. It stays true
// because the cache drops e whenever one of its sidecars is created,
// changed or removed (invalidateDir, revalidateLoop), as it drops e when
// the file itself changes; a sidecar entry merely evicted from the cache
// changes nothing.
func (c *Cache) sidecars(site *Site, s *Scratch, rel []byte, e *Entry) (uint8, bool) {
	m := e.sidecars.Load()
	if m&sidecarsKnown == 0 {
		pending, keep := false, true
		m = sidecarsKnown
		for i := range Codings {
			side := s.lookup(c, site.Root, s.sidecarPath(rel, i))
			switch {
			case side == nil:
				pending = true // keep looking: one worker trip opens them all
			case side.Kind == KindError:
				keep = false // not cached, no event will say it cleared: ask again next time
			case freshSidecar(e, side):
				m |= 1 << i
				if side.viaHidden {
					m |= 1 << (sidecarHiddenBits + i)
				}
			}
		}
		if pending {
			return 0, false
		}
		if keep {
			e.sidecars.Store(m)
		}
	}
	avail := uint8(m)
	if site.HideDotfiles {
		avail &^= uint8(m >> sidecarHiddenBits)
	}
	return avail, true
}

// sidecarPath builds rel plus the suffix of Codings[i] in s.tmp.
func (s *Scratch) sidecarPath(rel []byte, i int) []byte {
	p := append(s.tmp[:0], rel...)
	p = append(p, Codings[i].Suffix...)
	s.tmp = p
	return p
}

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
