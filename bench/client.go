package bench

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// conn is one client connection (for h2, h3 and webtransport, shared by
// its streams).
type conn struct {
	rt    http.RoundTripper // h1, h2, h3
	wt    *wtConn           // webtransport
	close func()
}

// readBuffer is the size of the transport's bufio.Reader: one TLS record.
// A body read at least this large bypasses it (bufio reads straight into
// the caller's buffer), so the bodyReader's large reads copy each byte
// once, from the socket or the decrypted record into the buffer that is
// hashed; a larger bufio.Reader would take most of those reads through
// its own buffer and copy every byte twice (the TLS self-check measured
// 16 KiB a tenth faster than 256 KiB).
const readBuffer = 16 << 10

// newConn builds a round tripper that holds exactly one connection (per
// dial) and counts every connection it opens; tcp, when set, is handed
// each TCP connection to read.
func newConn(c *Config, dials *atomic.Int64, tcp *tcpWatch) *conn {
	tlsConf := &tls.Config{InsecureSkipVerify: c.Insecure, ClientSessionCache: nil, CurvePreferences: c.KeyExchanges}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	countingDial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		cn, err := dialer.DialContext(ctx, network, addr)
		if err == nil && tcp != nil {
			cn = tcp.track(cn)
		}
		return cn, err
	}
	switch c.Protocol {
	case "webtransport":
		w := newWTConn(c, dials)
		return &conn{wt: w, close: w.close}
	case "h3":
		tr := &http3.Transport{
			TLSClientConfig: tlsConf,
			QUICConfig:      &quic.Config{MaxIncomingStreams: -1, InitialStreamReceiveWindow: 8 << 20, MaxStreamReceiveWindow: 32 << 20, InitialConnectionReceiveWindow: 16 << 20, MaxConnectionReceiveWindow: 64 << 20},
			Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				dials.Add(1)
				return quic.DialAddr(ctx, addr, tc, qc)
			},
		}
		return &conn{rt: tr, close: func() { tr.Close() }}
	default:
		tr := &http.Transport{
			DialContext:         countingDial,
			TLSClientConfig:     tlsConf,
			MaxConnsPerHost:     1,
			MaxIdleConnsPerHost: 1,
			DisableCompression:  true,
			DisableKeepAlives:   c.NewConnectionPerRequest,
			ReadBufferSize:      readBuffer,
			WriteBufferSize:     16 << 10,
			ForceAttemptHTTP2:   c.Protocol == "h2",
		}
		if c.Protocol == "h1" {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // never HTTP/2
		}
		return &conn{rt: tr, close: tr.CloseIdleConnections}
	}
}
