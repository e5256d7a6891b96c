package files

import (
	"os"
	"sort"
	"strings"
	"unicode/utf8"
)

// A directory listing shows names an uploader chose. Nothing in a name
// may become markup, a link to another scheme or origin, or a link to a
// different file than the one named:
//
//   - every link is "./" followed by the name percent-encoded byte by
//     byte (everything but unreserved characters and the "/" after a
//     directory), so "javascript:x" becomes "./javascript%3Ax", a
//     relative link to that very file, and a browser never sees a scheme;
//   - the visible text is HTML-escaped, with invalid UTF-8, control
//     characters (a newline in a name), bidirectional controls (a
//     right-to-left override making "exe.txt" look like "txt.exe") and
//     invisible characters (zero-width spaces and joiners, line and
//     paragraph separators, BOM) shown as U+FFFD.

// listEntry is one name in a listing.
type listEntry struct {
	name string
	dir  bool
}

// listDirectory renders rel beneath root as a minimal HTML index, leaving
// out dotfiles when hideDot is set. It returns nil when the directory
// cannot be read.
func listDirectory(root *Root, rel string, hideDot bool) []byte {
	fd, err := openBeneath(root, rel)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil
	}
	list := make([]listEntry, 0, len(ents))
	for _, de := range ents {
		if hideDot && de.Name()[0] == '.' {
			continue
		}
		if !requestable(de.Name()) {
			// No request names it (CleanPath refuses the path): a link
			// would answer 400, so the name is left out.
			continue
		}
		list = append(list, listEntry{name: de.Name(), dir: de.IsDir()})
	}
	return renderListing(nil, "/"+rel, list)
}

// requestable reports whether a request can name a file called name:
// CleanPath refuses a path with a NUL or a backslash in it.
func requestable(name string) bool { return !strings.ContainsAny(name, "\x00\\") }

// renderListing appends the HTML listing of the directory at urlPath
// (decoded, as shown in the title) holding entries.
func renderListing(b []byte, urlPath string, entries []listEntry) []byte {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	b = append(b, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Index of "...)
	b = appendHTMLText(b, urlPath)
	b = append(b, "</title></head><body><h1>Index of "...)
	b = appendHTMLText(b, urlPath)
	b = append(b, "</h1><pre>\n<a href=\"../\">../</a>\n"...)
	for _, e := range entries {
		b = append(b, "<a href=\"./"...)
		b = AppendPathEscaped(b, e.name, false)
		if e.dir {
			b = append(b, '/')
		}
		b = append(b, "\">"...)
		b = appendHTMLText(b, e.name)
		if e.dir {
			b = append(b, '/')
		}
		b = append(b, "</a>\n"...)
	}
	return append(b, "</pre></body></html>\n"...)
}

// AppendPathEscaped appends p percent-encoded: every byte except the
// unreserved characters of RFC 3986 (and "/" when keepSlash is set)
// becomes %XX. The result is safe in an HTML attribute and in a Location
// field, and can never be read as a scheme (":" is encoded) or carry a
// query or fragment.
func AppendPathEscaped(b []byte, p string, keepSlash bool) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/' && keepSlash:
			b = append(b, c)
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return b
}

// appendHTMLText appends s escaped for HTML text and attribute values,
// with invalid UTF-8, control characters, bidirectional controls and
// invisible characters replaced by U+FFFD.
func appendHTMLText(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1, r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0,
			r == 0x061c, r >= 0x200b && r <= 0x200f, r >= 0x2028 && r <= 0x202e, r >= 0x2060 && r <= 0x2069, r == 0xfeff:
			b = append(b, "\uFFFD"...)
		case r == '&':
			b = append(b, "&amp;"...)
		case r == '<':
			b = append(b, "&lt;"...)
		case r == '>':
			b = append(b, "&gt;"...)
		case r == '"':
			b = append(b, "&#34;"...)
		case r == '\'':
			b = append(b, "&#39;"...)
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}
