package engine

import (
	"strings"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/preflight"
)

// PreflightNeeds says which kernel features cfg needs and how much: what
// engine serve probes before binding, and engine preflight -c reports.
func PreflightNeeds(cfg *config.Config) preflight.Needs {
	// Each connection is a descriptor, and so is each file the open-file
	// cache keeps open; a few more are the server's own.
	n := preflight.Needs{OpenFiles: cfg.Limits.MaxConnections + files.DefaultMaxEntries + 64}
	switch cfg.Kernel.KTLS {
	case "require":
		n.KTLS = preflight.Require
	case "auto":
		n.KTLS = preflight.Auto
	default:
		n.KTLS = preflight.Off
	}
	if cc := cfg.Kernel.BulkCongestion; cc != "" && cc != "off" {
		n.Congestion = cc
		switch cfg.Kernel.BBR {
		case "require":
			n.CongestionMode = preflight.Require
		case "off":
			n.CongestionMode = preflight.Off
		default:
			n.CongestionMode = preflight.Auto
		}
	}
	n.QUIC = cfg.H3Enabled()
	return n
}

// PreflightError is serve's refusal to start: a feature the configuration
// requires is missing. Report says which, and how to fix it.
type PreflightError struct {
	Report *preflight.Report
}

func (e *PreflightError) Error() string {
	msg := "required kernel features missing:"
	for _, c := range e.Report.Failed() {
		msg += " " + c.ID
	}
	return msg
}

// checkKernel runs the probes cfg needs, before anything binds. Missing
// required features are fatal; the rest are logged as warnings.
func (s *Server) checkKernel() error {
	n := PreflightNeeds(s.cfg)
	r := s.prober.Run(n)
	if !r.OK {
		return &PreflightError{Report: r}
	}
	ok := map[string]bool{}
	for _, c := range r.Checks {
		ok[c.ID] = c.Status == preflight.OK
	}
	s.ktlsOK = ok["ktls.ulp"] && ok["ktls.sendfile"]
	s.ktlsRekey = s.ktlsOK && ok["ktls.rekey"]
	for _, c := range r.Warnings() {
		if strings.HasPrefix(c.Reason, "not tried:") {
			continue // follows from a line already logged
		}
		msg := "kernel feature missing; running degraded"
		if c.ID == "ktls.ulp" {
			msg = "kernel TLS unavailable; TLS is served from userspace"
		}
		s.log.Warn(msg, "check", c.ID, "reason", c.Reason, "fix", c.Remedy)
	}
	return nil
}
