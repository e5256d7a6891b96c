// Command gohttp is the "Go net/http" peer of bench/compare: the standard
// library's http.FileServer over one folder, plain on one address and TLS
// (HTTP/1.1 and HTTP/2, crypto/tls defaults, session tickets on) on
// another, in one process. It is what a Go program gets from net/http
// with no tuning, so every setting here is a default except the
// addresses, the certificate.
//
//	gohttp -root DIR -plain 127.0.0.1:8080 -tls 127.0.0.1:8443 -cert cert.pem -key key.pem
//
// With -h3 ADDR it also serves the folder over HTTP/3 (quic-go's http3
// server, its defaults) on that UDP address: the QUIC origin behind the
// passthrough rows. Any of -plain, -tls and -h3 may be left out, not all.
//
// It is built and run by bench/compare; it is not a server to deploy.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	root := flag.String("root", "", "folder to serve")
	plain := flag.String("plain", "", "address for plain HTTP/1.1")
	tlsAddr := flag.String("tls", "", "address for TLS (HTTP/1.1 and HTTP/2)")
	h3Addr := flag.String("h3", "", "UDP address for HTTP/3")
	cert := flag.String("cert", "", "certificate (PEM)")
	key := flag.String("key", "", "private key (PEM)")
	flag.Parse()
	if *root == "" || *cert == "" || *key == "" || *plain == "" && *tlsAddr == "" && *h3Addr == "" {
		log.Fatal("gohttp: -root, -cert, -key and at least one of -plain, -tls and -h3 are required")
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("gohttp: %v", err)
	}
	files := http.FileServer(http.Dir(*root))
	errs := make(chan error, 3)
	var closers []func() error
	if *plain != "" {
		s := &http.Server{Addr: *plain, Handler: files}
		closers = append(closers, s.Close)
		go func() { errs <- s.ListenAndServe() }()
	}
	if *tlsAddr != "" {
		// ServeTLS turns HTTP/2 on, as ListenAndServeTLS does, because
		// TLSNextProto is nil.
		s := &http.Server{Addr: *tlsAddr, Handler: files, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}}
		closers = append(closers, s.Close)
		go func() { errs <- s.ListenAndServeTLS("", "") }()
	}
	if *h3Addr != "" {
		s := &http3.Server{Addr: *h3Addr, Handler: files, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{pair}})}
		closers = append(closers, s.Close)
		go func() { errs <- s.ListenAndServe() }()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	select {
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("gohttp: %v", err)
		}
	case <-stop:
		for _, c := range closers {
			c()
		}
	}
}
