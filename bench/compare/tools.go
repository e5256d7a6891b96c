package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
)

// A program the run needs from Debian: the external clients, and
// lighttpd. When it is missing and the harness runs as root, the harness
// installs it with apt-get and the page says so; otherwise what needs it
// is left out, with the command that would install it.
type debTool struct {
	bin   string   // looked up on $PATH
	files []string // must exist too (lighttpd's TLS module)
	pkgs  []string // the Debian packages that provide them
}

var (
	toolCurl     = debTool{bin: "curl", pkgs: []string{"curl"}}
	toolWrk      = debTool{bin: "wrk", pkgs: []string{"wrk"}}
	toolH2load   = debTool{bin: "h2load", pkgs: []string{"nghttp2-client"}}
	toolOpenSSL  = debTool{bin: "openssl", pkgs: []string{"openssl"}}
	toolLighttpd = debTool{bin: "lighttpd", files: []string{"/usr/lib/lighttpd/mod_openssl.so"}, pkgs: []string{"lighttpd", "lighttpd-mod-openssl"}}
)

func (t debTool) installCommand() string {
	return "apt-get install -y " + strings.Join(t.pkgs, " ")
}

// missing says what of the tool is not on this machine, "" if nothing.
func (t debTool) missing() string {
	if _, err := exec.LookPath(t.bin); err != nil {
		return t.bin + " not installed"
	}
	for _, f := range t.files {
		if _, err := os.Stat(f); err != nil {
			return f + " missing"
		}
	}
	return ""
}

// installer makes sure tools are present, installing the missing ones
// with apt-get when it runs as root, and remembers what it did for the
// page. Used from the main goroutine only.
type installer struct {
	root      bool
	updated   bool     // apt-get update has run
	installed []string // the commands that ran and worked, for the page
	failed    map[string]error
}

func newInstaller() *installer {
	return &installer{root: os.Geteuid() == 0, failed: map[string]error{}}
}

// ensure returns nil when the tool is there (perhaps installed just
// now), or an error naming what is missing and the command to install it.
func (in *installer) ensure(t debTool) error {
	what := t.missing()
	if what == "" {
		return nil
	}
	cmd := t.installCommand()
	if err, tried := in.failed[cmd]; tried {
		return err
	}
	if !in.root {
		return fmt.Errorf("%s: run `%s` as root, then run this again", what, cmd)
	}
	log.Printf("%s: running `%s`", what, cmd)
	err := in.aptGet(append([]string{"install", "-y"}, t.pkgs...)...)
	if err != nil && !in.updated {
		// The package lists may be stale or absent (a fresh container).
		log.Printf("apt-get install failed (%v): running `apt-get update` and trying again", err)
		in.updated = true
		if err = in.aptGet("update"); err == nil {
			err = in.aptGet(append([]string{"install", "-y"}, t.pkgs...)...)
		}
	}
	if err == nil {
		if what = t.missing(); what != "" {
			err = fmt.Errorf("still %s after `%s`", what, cmd)
		}
	}
	if err != nil {
		err = fmt.Errorf("%s, and `%s` failed: %v", t.missing(), cmd, err)
		in.failed[cmd] = err
		return err
	}
	log.Printf("installed: %s", strings.Join(t.pkgs, ", "))
	in.installed = append(in.installed, "`"+cmd+"`")
	return nil
}

func (in *installer) aptGet(args ...string) error {
	c := exec.Command("apt-get", args...)
	c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := c.CombinedOutput()
	if err != nil {
		s := strings.TrimSpace(string(out))
		if len(s) > 400 {
			s = "..." + s[len(s)-400:]
		}
		return fmt.Errorf("%v: %s", err, s)
	}
	return nil
}
