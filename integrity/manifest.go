package integrity

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Entry is one line of a manifest: a digest and a path relative to the
// manifest's root, '/'-separated.
type Entry struct {
	Digest Digest
	Path   string
	// SHA256 is the file's SHA-256, when TreeOptions.SHA256 asked for it.
	SHA256 *SHA256
}

// SHA256Entries are entries' SHA-256 digests as entries of a manifest in
// sha256sum's format (the same lines as b3sum's): WriteManifest writes
// them as SHA256SUMS. Entries without one are left out.
func SHA256Entries(entries []Entry) []Entry {
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if e.SHA256 != nil {
			out = append(out, Entry{Digest: Digest(*e.SHA256), Path: e.Path})
		}
	}
	return out
}

// ManifestError is a malformed manifest line.
type ManifestError struct {
	Line int
	Msg  string
}

func (e *ManifestError) Error() string {
	return fmt.Sprintf("integrity: manifest line %d: %s", e.Line, e.Msg)
}

// maxManifestLine bounds one line (a path of 4 KiB escaped, and the digest).
const maxManifestLine = 64 + 2 + 2*4096 + 1

// ReadManifest parses the format b3sum writes and checks:
//
//	<64 hex digits>  <path>
//
// A line whose path holds a backslash or a newline starts with a
// backslash, and in its path "\\" stands for a backslash and "\n" for a
// newline. Every malformed line is an error naming its number.
func ReadManifest(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxManifestLine)
	var out []Entry
	seen := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSuffix(sc.Text(), "\r")
		if text == "" {
			continue
		}
		escaped := strings.HasPrefix(text, `\`)
		if escaped {
			text = text[1:]
		}
		if len(text) < 64+2+1 || text[64:66] != "  " {
			return nil, &ManifestError{line, "expected 64 hex digits, two spaces and a path"}
		}
		d, err := ParseHex(text[:64])
		if err != nil {
			return nil, &ManifestError{line, "the digest is not 64 hex digits"}
		}
		path := text[66:]
		if escaped {
			if path, err = unescape(path); err != nil {
				return nil, &ManifestError{line, err.Error()}
			}
		}
		if strings.HasPrefix(path, "/") || path == ".." || strings.HasPrefix(path, "../") || strings.Contains(path, "/../") ||
			strings.HasSuffix(path, "/..") || strings.ContainsRune(path, 0) {
			return nil, &ManifestError{line, fmt.Sprintf("path %q leaves the manifest's root", path)}
		}
		path = strings.TrimPrefix(path, "./")
		if prev, dup := seen[path]; dup {
			return nil, &ManifestError{line, fmt.Sprintf("path %q already listed on line %d", path, prev)}
		}
		seen[path] = line
		out = append(out, Entry{Digest: d, Path: path})
	}
	if err := sc.Err(); err != nil {
		return nil, &ManifestError{line + 1, err.Error()}
	}
	return out, nil
}

// unescape undoes b3sum's escapes. Its errors are reasons for a
// ManifestError, which adds the package and the line.
func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", errors.New("path ends in a lone backslash")
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		default:
			return "", fmt.Errorf(`unknown escape \%c in the path`, s[i])
		}
	}
	return b.String(), nil
}

// WriteManifest writes entries sorted by path, escaped as b3sum escapes.
func WriteManifest(w io.Writer, entries []Entry) error {
	sorted := append([]Entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	bw := bufio.NewWriter(w)
	for _, e := range sorted {
		if strings.ContainsAny(e.Path, "\\\n") {
			p := strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(e.Path)
			fmt.Fprintf(bw, "\\%s  %s\n", e.Digest, p)
		} else {
			fmt.Fprintf(bw, "%s  %s\n", e.Digest, e.Path)
		}
	}
	return bw.Flush()
}
