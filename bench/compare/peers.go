package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench/peer"
)

// startLighttpd runs the system's lighttpd (Debian's package, with its
// TLS module) with the peers' template: plain on one port, TLS with
// HTTP/1.1 and HTTP/2 on another, one process.
func startLighttpd(work string, peers peerTemplates) (*server, error) {
	ports, err := peer.FreePorts(false, false) // plain, TLS
	if err != nil {
		return nil, err
	}
	conf, err := peers.fill("lighttpd.conf.tmpl", "__DIR__", work, "__PLAIN_PORT__", strconv.Itoa(ports[0]), "__TLS_PORT__", strconv.Itoa(ports[1]))
	if err != nil {
		return nil, err
	}
	os.MkdirAll(filepath.Join(work, "logs"), 0o755)
	path := filepath.Join(work, "lighttpd.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command("lighttpd", "-v").Output()
	s := &server{id: "lighttpd", name: "lighttpd",
		plain: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), tls: fmt.Sprintf("https://127.0.0.1:%d", ports[1])}
	if s.proc, err = startProc(filepath.Join(work, "lighttpd.log"), "lighttpd", []string{"-D", "-f", path}); err != nil {
		return nil, err
	}
	for _, u := range []string{s.plain, s.tls} {
		if err := s.proc.waitReady(u + "/1k.bin"); err != nil {
			if t, _ := os.ReadFile(filepath.Join(work, "logs", "lighttpd-error.log")); portTaken(string(t)) {
				err = fmt.Errorf("%w: %v", errPortTaken, err)
			}
			s.stop()
			return nil, err
		}
	}
	// The template turns HTTP/2 on; whether this build speaks it is
	// asked of the server rather than assumed.
	h2 := "HTTP/2 on TLS"
	if s.h2 = speaksH2(s.tls + "/1k.bin"); !s.h2 {
		h2 = "no HTTP/2 (ALPN did not select h2)"
	}
	s.about = strings.TrimSpace(firstLine(string(version))) + " (" + peers.name + "/lighttpd.conf.tmpl: one process, sendfile for plain HTTP, no access log; mod_openssl; " + h2 + "; kernel TLS not offered)"
	return s, nil
}

// speaksH2 reports whether a TLS URL answers 200 over HTTP/2.
func speaksH2(url string) bool {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200 && resp.ProtoMajor == 2
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// startGoHTTP runs the Go net/http peer: http.FileServer, plain and TLS
// (HTTP/1.1 and HTTP/2) in one process.
func startGoHTTP(work, bin string) (*server, error) {
	ports, err := peer.FreePorts(false, false) // plain, TLS
	if err != nil {
		return nil, err
	}
	plainAddr, tlsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	goVer, _ := exec.Command("go", "env", "GOVERSION").Output()
	s := &server{id: "gohttp", name: "Go net/http", plain: "http://" + plainAddr, tls: "https://" + tlsAddr, h2: true,
		about: "bench/compare/gohttp built with " + strings.TrimSpace(string(goVer)) + ": `http.FileServer` with every net/http and crypto/tls default (HTTP/2 on TLS, session tickets on), plain and TLS in one process"}
	args := []string{"-root", filepath.Join(work, "www"), "-plain", plainAddr, "-tls", tlsAddr,
		"-cert", filepath.Join(work, "cert.pem"), "-key", filepath.Join(work, "key.pem")}
	if s.proc, err = startProc(filepath.Join(work, "gohttp.log"), bin, args); err != nil {
		return nil, err
	}
	if err := s.waitServing(); err != nil {
		return nil, err
	}
	return s, nil
}
