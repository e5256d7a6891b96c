package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/acme"
)

// TestWriteACMEText: preflight's ACME lines say OK only for a certificate
// valid now; one that expired, or is not valid yet, says so.
func TestWriteACMEText(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		st   acme.Status
		want string
	}{
		{acme.Status{Name: "ok.test", NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour)}, "OK "},
		{acme.Status{Name: "old.test", NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}, "EXPIRED "},
		{acme.Status{Name: "soon.test", NotBefore: now.Add(24 * time.Hour), NotAfter: now.Add(48 * time.Hour)}, "NOTYET "},
		{acme.Status{Name: "none.test", Missing: "not obtained yet"}, "NONE "},
	} {
		var b strings.Builder
		if err := writeACMEText(&b, []acme.Status{tc.st}); err != nil {
			t.Fatal(err)
		}
		line := b.String()[strings.LastIndex(strings.TrimSuffix(b.String(), "\n"), "\n")+1:]
		if !strings.Contains(line, tc.st.Name) || !strings.Contains(line, tc.want) {
			t.Errorf("writeACMEText(%s) = %q, want status %q", tc.st.Name, line, strings.TrimSpace(tc.want))
		}
	}
}
