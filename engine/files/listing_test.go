package files

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// hrefRE finds the links of a listing, with their visible text.
var hrefRE = regexp.MustCompile(`<a href="([^"]*)">([^<]*)</a>`)

// checkListing asserts the invariants of a listing of names: one link per
// name, each "./" plus only unreserved characters and %XX, decoding to
// exactly the name; visible text that decodes to the name as shown.
func checkListing(t *testing.T, names []string) {
	t.Helper()
	entries := make([]listEntry, len(names))
	for i, n := range names {
		entries[i] = listEntry{name: n}
	}
	out := string(renderListing(nil, "/dir", entries))
	links := hrefRE.FindAllStringSubmatch(out, -1)
	if len(links) != len(names)+1 {
		t.Fatalf("listing of %q has %d links, want %d:\n%s", names, len(links), len(names)+1, out)
	}
	if strings.Count(out, "<") != strings.Count(renderEmpty(), "<")+2*len(names) {
		t.Fatalf("listing of %q has markup from a name:\n%s", names, out)
	}
	got := map[string]bool{}
	for _, l := range links[1:] {
		href, text := l[1], l[2]
		if !strings.HasPrefix(href, "./") || strings.Trim(href[2:], "ABCDEFabcdefghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ0123456789-._~%") != "" {
			t.Fatalf("href %q is not ./ plus a percent-encoded name", href)
		}
		name, err := url.PathUnescape(href[2:])
		if err != nil {
			t.Fatalf("href %q: %v", href, err)
		}
		u, err := url.Parse(href)
		if err != nil || u.Scheme != "" || u.Host != "" || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("href %q parses as %#v, %v", href, u, err)
		}
		shown := html.UnescapeString(text)
		if !utf8.ValidString(shown) || strings.ContainsAny(shown, "\n\r\x00\u202e\u2066\u200b\u2028\ufeff") {
			t.Fatalf("visible text %q of %q", shown, name)
		}
		got[name] = true
	}
	for _, n := range names {
		if !got[n] {
			t.Errorf("no link leads to %q:\n%s", n, out)
		}
	}
}

func renderEmpty() string { return string(renderListing(nil, "/dir", nil)) }

func TestListingEscapes(t *testing.T) {
	names := []string{
		"javascript:alert(document.domain)", `a"b`, "<script>x</script>", "a&amp;b", "#frag", "?q=1",
		"100%", "two words", "line\nbreak", "evil\u202etxt.exe", "zero\u200bwidth\ufeff", "bad\xffutf8", "café", "'quote'", "//evil.example", "data:text/html,x",
	}
	checkListing(t, names)
	out := string(renderListing(nil, "/dir", []listEntry{{name: "javascript:alert(document.domain)"}, {name: "sub", dir: true}}))
	for _, want := range []string{`href="./javascript%3Aalert%28document.domain%29"`, `href="./sub/">sub/</a>`} {
		if !strings.Contains(out, want) {
			t.Errorf("listing lacks %s:\n%s", want, out)
		}
	}
	if title := string(renderListing(nil, "/<b>&", nil)); !strings.Contains(title, "Index of /&lt;b&gt;&amp;</h1>") {
		t.Errorf("title not escaped: %s", title)
	}
}

func TestHidden(t *testing.T) {
	tests := []struct {
		rel  string
		want bool
	}{
		{".env", true}, {".git/config", true}, {"a/.git/config", true}, {"a/.b", true},
		{"a.b", false}, {"a/b.c", false}, {"", false}, {"..a", true},
		{".well-known", false}, {".well-known/security.txt", false}, {".well-known/.x", true},
		{"a/.well-known/x", true}, {".well-knownx", true},
	}
	for _, tt := range tests {
		if got := hidden([]byte(tt.rel)); got != tt.want {
			t.Errorf("hidden(%q) = %v, want %v", tt.rel, got, tt.want)
		}
	}
}

func TestAppendPathEscaped(t *testing.T) {
	for in, want := range map[string]string{
		"a/b c":     "a/b%20c",
		"evil.com":  "evil.com",
		"x:y?z#w%":  "x%3Ay%3Fz%23w%25",
		"\xff\r\n":  "%FF%0D%0A",
		"a-b_c.d~e": "a-b_c.d~e",
	} {
		if got := string(AppendPathEscaped(nil, in, true)); got != want {
			t.Errorf("AppendPathEscaped(%q) = %q, want %q", in, got, want)
		}
	}
	if got := string(AppendPathEscaped(nil, "a/b", false)); got != "a%2Fb" {
		t.Errorf("AppendPathEscaped(a/b, no slash) = %q", got)
	}
}

func FuzzListing(f *testing.F) {
	for _, s := range []string{"javascript:alert(1)", `"><img src=x onerror=alert(1)>`, "a\nb", "\xff", "%2e%2e", "&lt;"} {
		f.Add(s, "b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" || a == b || strings.ContainsAny(a+b, "/\x00") {
			return // not names a directory can hold twice
		}
		checkListing(t, []string{a, b})
	})
}
