package preflight

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText prints the report as a table for a terminal: one line per
// check, and under each check that is not ok the remedy.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "engine preflight: kernel %s\n\n", r.Kernel)
	width := len("CHECK")
	for _, c := range r.Checks {
		width = max(width, len(c.Title))
	}
	fmt.Fprintf(&b, "%-*s  %-6s  %s\n", width, "CHECK", "STATUS", "REASON")
	for _, c := range r.Checks {
		status := strings.ToUpper(string(c.Status))
		fmt.Fprintf(&b, "%-*s  %-6s  %s\n", width, c.Title, status, c.Reason)
		if c.Status != OK && c.Remedy != "" {
			fmt.Fprintf(&b, "%-*s  %-6s  fix: %s\n", width, "", "", c.Remedy)
		}
	}
	fail, warn := len(r.Failed()), len(r.Warnings())
	switch {
	case fail > 0:
		fmt.Fprintf(&b, "\n%d required feature(s) missing: engine serve will refuse to start with this configuration.\n", fail)
	case warn > 0:
		fmt.Fprintf(&b, "\nAll required features present; %d warning(s): the engine runs, slower where noted.\n", warn)
	default:
		fmt.Fprintf(&b, "\nAll features present.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as one JSON object:
//
//	{"kernel": "...", "ok": true,
//	 "checks": [{"id": "ktls.ulp", "title": "...", "status": "ok|warn|fail",
//	             "required": true, "reason": "...", "remedy": "..."}]}
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
