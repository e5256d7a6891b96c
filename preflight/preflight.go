package preflight

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// ErrNotSupported matches errors of probes that found a feature
// conclusively missing.
var ErrNotSupported = errors.New("preflight: not supported")

// NotSupportedError says what is missing, what was tried, and the remedy.
type NotSupportedError struct {
	Feature string // "kernel TLS", "BBR", ...
	Tried   string // the operation: `setsockopt(TCP_ULP, "tls")`
	Reason  string // what the answer means, in a phrase
	Remedy  string // one line: a command, a sysctl
	// Degrade is the [kernel] key that runs without the feature on
	// purpose ("ktls", "bbr"); empty when there is none.
	Degrade string
	Err     error // the errno, when there is one
}

func (e *NotSupportedError) Error() string {
	return e.Feature + " not supported: " + e.detail()
}

// detail is the reason and the evidence: `this kernel has no tls module
// (setsockopt(TCP_ULP, "tls"): ENOENT)`.
func (e *NotSupportedError) detail() string {
	ev := e.Tried
	if e.Err != nil {
		ev += ": " + errName(e.Err)
	}
	if e.Reason == "" {
		return ev
	}
	return e.Reason + " (" + ev + ")"
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Is(target error) bool { return target == ErrNotSupported }

// Unwrap returns the errno.
func (e *NotSupportedError) Unwrap() error { return e.Err }

// Mode is how much a configuration needs a feature.
type Mode string

const (
	Require Mode = "require" // missing is fatal: serve refuses to start
	Auto    Mode = "auto"    // missing is a warning: serve runs degraded
	Off     Mode = "off"     // not probed
)

// Needs says which features to probe and how much each matters.
type Needs struct {
	// KTLS governs the kernel TLS probes (the tls ULP, TX for each
	// suite, sendfile, record types). Rekey is always a warning.
	KTLS Mode
	// Congestion names the bulk congestion control ("bbr"); empty skips
	// it. CongestionMode says how much it matters.
	Congestion     string
	CongestionMode Mode
	// QUIC adds the warnings HTTP/3 cares about: UDP GSO and socket
	// buffer limits.
	QUIC bool
	// Steering adds the eBPF sk_reuseport check (a warning: without it
	// the kernel hash spreads connections).
	Steering bool
	// OpenFiles, when positive, is how many descriptors the server may
	// hold (connections, cached files, its own); the open-files limit is
	// checked against it (a warning).
	OpenFiles int
}

// All is what `engine preflight` probes without a config: everything,
// with kTLS and BBR as warnings.
func All() Needs {
	return Needs{KTLS: Auto, Congestion: "bbr", CongestionMode: Auto, QUIC: true, Steering: true, OpenFiles: 8192 + 4096 + 64}
}

// Status is the outcome of one check.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn" // missing or unknown, and the config runs without it (slower)
	Fail Status = "fail" // missing or unknown, and the config requires it
)

// Check is one line of a report.
type Check struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Status   Status `json:"status"`
	Required bool   `json:"required"`
	Reason   string `json:"reason"`
	Remedy   string `json:"remedy,omitempty"`
}

// Report is the result of a preflight run.
type Report struct {
	Kernel string  `json:"kernel"`
	OK     bool    `json:"ok"` // no required check failed
	Checks []Check `json:"checks"`
}

// Failed returns the checks that failed.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c)
		}
	}
	return out
}

// Warnings returns the checks that warn.
func (r *Report) Warnings() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == Warn {
			out = append(out, c)
		}
	}
	return out
}

// judge turns a probe's answer into a check line.
func judge(id, title string, mode Mode, err error, okReason string) Check {
	c := Check{ID: id, Title: title, Required: mode == Require}
	var ns *NotSupportedError
	switch {
	case err == nil:
		c.Status, c.Reason = OK, okReason
		return c
	case errors.As(err, &ns):
		c.Reason = oneLine(ns.detail())
		c.Remedy = ns.Remedy
		if mode == Require && ns.Degrade != "" {
			// Only a required feature needs the way to run without it.
			if c.Remedy != "" {
				c.Remedy += "; or "
			}
			c.Remedy += degrade(ns.Degrade)
		}
	default:
		// The report is preflight's own: its prefix would only repeat it.
		c.Reason = "could not tell: " + oneLine(strings.TrimPrefix(err.Error(), "preflight: "))
	}
	c.Status = Warn
	if mode == Require {
		c.Status = Fail
	}
	return c
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// degrade is the config line that runs without a feature on purpose.
func degrade(key string) string {
	return fmt.Sprintf("set %s = \"auto\" in [kernel] to run without it", key)
}

// errName names an errno ("ENOENT"); other errors print as they are.
func errName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if name := errnoName(e); name != "" {
			return name
		}
	}
	return err.Error()
}
