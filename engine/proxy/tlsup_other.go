//go:build !linux

package proxy

import (
	"errors"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/routing"
)

func dialTLS(*reactor.Loop, *routing.Upstream, time.Duration, reactor.Handler) (*reactor.Conn, error) {
	return nil, errors.New("proxy: TLS to upstreams needs Linux")
}
