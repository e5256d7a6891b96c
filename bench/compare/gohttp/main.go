// Command gohttp is the "Go net/http" peer of bench/compare: the standard
// library's http.FileServer over one folder, plain on one address and TLS
// (HTTP/1.1 and HTTP/2, crypto/tls defaults, session tickets on) on
// another, in one process. It is what a Go program gets from net/http
// with no tuning, so every setting here is a default except the
// addresses, the certificate.
//
//	gohttp -root DIR -plain 127.0.0.1:8080 -tls 127.0.0.1:8443 -cert cert.pem -key key.pem
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
)

func main() {
	root := flag.String("root", "", "folder to serve")
	plain := flag.String("plain", "", "address for plain HTTP/1.1")
	tlsAddr := flag.String("tls", "", "address for TLS (HTTP/1.1 and HTTP/2)")
	cert := flag.String("cert", "", "certificate (PEM)")
	key := flag.String("key", "", "private key (PEM)")
	flag.Parse()
	if *root == "" || *plain == "" || *tlsAddr == "" || *cert == "" || *key == "" {
		log.Fatal("gohttp: -root, -plain, -tls, -cert and -key are all required")
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("gohttp: %v", err)
	}
	files := http.FileServer(http.Dir(*root))
	// ServeTLS turns HTTP/2 on, as ListenAndServeTLS does, because
	// TLSNextProto is nil.
	servers := []*http.Server{
		{Addr: *plain, Handler: files},
		{Addr: *tlsAddr, Handler: files, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}},
	}
	errs := make(chan error, len(servers))
	go func() { errs <- servers[0].ListenAndServe() }()
	go func() { errs <- servers[1].ListenAndServeTLS("", "") }()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	select {
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("gohttp: %v", err)
		}
	case <-stop:
		for _, s := range servers {
			s.Close()
		}
	}
}
