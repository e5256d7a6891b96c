package main

import (
	"crypto/tls"
	"debug/buildinfo"
	"fmt"
	"os/exec"
	"strings"

	"github.com/mediaship/engine/bench"
)

// keyExchangeChoice is --key-exchange: the one TLS key exchange engine
// bench offers and the engine accepts, so that handshakes compare like
// with like; the zero value leaves every side at its default.
type keyExchangeChoice struct {
	name string // as key_exchanges writes it: "X25519"
	id   tls.CurveID
}

// ids is bench.Config.KeyExchanges: nil for the client's default.
func (k keyExchangeChoice) ids() []tls.CurveID {
	if k.name == "" {
		return nil
	}
	return []tls.CurveID{k.id}
}

// keyExchangeStatement is the page's sentence on which key exchanges
// were offered and accepted.
func (p page) keyExchangeStatement() string {
	k := p.keyExchange
	var s string
	switch {
	case k.name == "":
		s = "Key exchanges: every side at its default (no `--key-exchange`)"
	case p.passthrough():
		s = fmt.Sprintf("Key exchanges: `--key-exchange %s`: `engine bench` offered only %s; the relays pass every handshake to the origin, which chose", k.name, k.name)
	default:
		s = fmt.Sprintf("Key exchanges: `--key-exchange %s`: `engine bench` offered only %s, and the engine's configuration accepted only it (`key_exchanges = [%q]`); the other servers kept their defaults", k.name, k.name, k.name)
	}
	switch {
	case !p.hasNewConns():
		return s + "; no row here makes a new connection per request, so the key exchange is no part of these figures."
	case p.external():
		return s + "; the external clients offer what their OpenSSL does. The table of key exchanges below names what each server negotiated on the rows of new connections."
	case k.name == "":
		return s + ": `engine bench` (Go's crypto/tls) offers X25519MLKEM768 first, which Go servers (the engine, Caddy, Go net/http) choose, while nginx, HAProxy and lighttpd (OpenSSL 3.0) do not have it and settle on X25519; the table of key exchanges below names what each server negotiated on the rows of new connections, and says when they differ."
	}
	return s + ". The table of key exchanges below names what each server negotiated on the rows of new connections."
}

// keyExchangesLine is the engine's key_exchanges setting for --key-exchange,
// a line of a TLS table; "" for the default.
func (spec engineSpec) keyExchangesLine() string {
	if spec.kx == "" {
		return ""
	}
	return fmt.Sprintf("key_exchanges = [%q]\n", spec.kx)
}

// keyExchangesNote is what the page adds to the engine's configuration
// for --key-exchange.
func (spec engineSpec) keyExchangesNote() string {
	if spec.kx == "" {
		return ""
	}
	return fmt.Sprintf("; `key_exchanges = [%q]` (--key-exchange)", spec.kx)
}

// engineBinary is what the page says an engine binary is: built by this
// run from a tree it read at the moment of the build, or given
// (--engine, --baseline), named by what its version stamp says.
type engineBinary struct {
	build   *bench.Build // nil for a binary given
	origin  string       // "--engine PATH", "--baseline PATH"; "" when built by this run alone
	version string       // its `engine version`
	sha     string       // its SHA-256
}

func newEngineBinary(spec engineSpec) (*engineBinary, error) {
	sum, err := fileSHA256(spec.bin)
	if err != nil {
		return nil, err
	}
	e := &engineBinary{build: spec.build, origin: spec.origin, sha: sum}
	if spec.build != nil {
		e.version = spec.build.Version
	} else {
		out, _ := exec.Command(spec.bin, "version").Output()
		e.version = bench.VersionLine(out)
	}
	return e, nil
}

// commit is the commit the binary was built from, as the page states
// it: the tree this run built it from, or what a given binary's stamp
// names, or "unknown".
func (e *engineBinary) commit() string {
	if e.build != nil {
		return e.build.Tree.String()
	}
	c, tree := bench.VersionCommit(e.version)
	switch {
	case c == "":
		return "unknown (its version names no commit: it was not built by this harness or bench.BuildEngine)"
	case tree == "":
		return c + " (as its version says; the state of its working tree is not stamped)"
	}
	return fmt.Sprintf("%s, working tree %s (as its version says)", c, tree)
}

// describe is the binary's entry on the page.
func (e *engineBinary) describe() string {
	sha := e.sha
	if len(sha) > 16 {
		sha = sha[:16]
	}
	var s string
	if e.build != nil {
		s = fmt.Sprintf("built by this run at %s from commit %s", e.build.At.UTC().Format("15:04 MST"), e.commit())
	} else {
		s = fmt.Sprintf("%s, commit %s", e.origin, e.commit())
	}
	return fmt.Sprintf("%s; SHA-256 %s; `engine version`: `%s`", s, sha, e.version)
}

// upstreamAbout names the versions of what the proxies and relays
// forward to, for the page: "" when there is none.
func upstreamAbout(b *backend, o *origin) string {
	if b == nil && o == nil {
		return ""
	}
	v, _ := exec.Command("nginx", "-v").CombinedOutput()
	s := strings.TrimSpace(string(v))
	if o != nil && o.udp != nil {
		s += "; the QUIC origin is " + goProgramAbout(o.udp.Cmd.Path)
	}
	return s
}

// goProgramAbout names a Go program built by the harness by what its
// build information says: its Go version and its quic-go.
func goProgramAbout(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "bench/compare/gohttp (build information unreadable)"
	}
	s := "bench/compare/gohttp built with " + bi.GoVersion
	for _, d := range bi.Deps {
		if d.Path == "github.com/quic-go/quic-go" {
			s += ", quic-go " + d.Version
		}
	}
	return s
}
