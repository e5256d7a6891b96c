//go:build !linux

package proxy

import (
	"errors"
	"net"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/routing"
)

// PipeSource needs Linux; the Source it returns fails.
func PipeSource(func(*net.UnixConn)) Source {
	return func(*reactor.Loop, time.Duration, reactor.Handler) (*reactor.Conn, error) {
		return nil, errors.New("proxy: sources need Linux")
	}
}

func dialTLS(*reactor.Loop, *routing.Upstream, time.Duration, time.Duration, reactor.Handler, func(string, ...any)) (*reactor.Conn, error) {
	return nil, errors.New("proxy: TLS to upstreams needs Linux")
}
