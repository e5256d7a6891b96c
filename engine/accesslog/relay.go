package accesslog

import (
	"net/netip"
	"strconv"
	"time"
)

// Relay is one connection TLS passthrough relayed, for its access log
// line when it ends.
type Relay struct {
	Start    time.Time // the connection was accepted
	Client   netip.Addr
	QUIC     bool           // a QUIC flow (UDP), not a TCP connection
	SNI      string         // the server name it named; "" for none
	Route    string         // the route's domain
	Upstream netip.AddrPort // the zero value when none was tried
	Up, Down int64          // bytes from the client to the upstream, and back
	// Status is nginx stream's $status: 200 (0 here) for a relay that
	// ran to its end, 502 when no upstream could be connected.
	Status int
}

// AppendRelay appends r's line to b when the log is on. In combined,
// the line is nginx's stream "basic" format with the upstream and the
// name after it: $remote_addr [$time_local] $protocol $status
// $bytes_sent $bytes_received $session_time "$upstream_addr"
// "$ssl_preread_server_name" (status 200: relayed to its end; 502: no
// upstream could be connected). In json, an object with "relay" ("tcp"
// or "quic") where a request line has "method": {"time", "client",
// "relay", "status", "sni", "route", "upstream" (null when none was
// tried), "bytes_up", "bytes_down", "duration"}. The time is when the
// connection was accepted (nginx's stream module logs when it ends; the
// end is time plus duration).
func (a *Log) AppendRelay(b []byte, clk *Clock, r *Relay) []byte {
	if a == nil {
		return b
	}
	clk.Set(r.Start)
	dur := time.Since(r.Start)
	status := r.Status
	if status == 0 {
		status = 200
	}
	if !a.json {
		b = r.Client.AppendTo(b)
		b = append(b, " ["...)
		b = append(b, clk.local...)
		b = append(b, "] "...)
		if r.QUIC {
			b = append(b, "UDP "...)
		} else {
			b = append(b, "TCP "...)
		}
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, r.Down, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, r.Up, 10)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, dur.Seconds(), 'f', 3, 64)
		b = append(b, ` "`...)
		if r.Upstream.IsValid() {
			b = r.Upstream.AppendTo(b)
		} else {
			b = append(b, '-')
		}
		b = append(b, `" `...)
		b = appendHeaderField(b, []byte(r.SNI), r.SNI != "")
		return append(b, '\n')
	}
	b = append(b, `{"time":"`...)
	b = append(b, clk.utc...)
	b = append(b, '.')
	b = appendDigits(b, int64(r.Start.Nanosecond()/1e6), 3)
	b = append(b, `Z","client":"`...)
	b = r.Client.AppendTo(b)
	if r.QUIC {
		b = append(b, `","relay":"quic","status":`...)
	} else {
		b = append(b, `","relay":"tcp","status":`...)
	}
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"sni":`...)
	if r.SNI == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, []byte(r.SNI))
	}
	b = append(b, `,"route":`...)
	b = appendJSONString(b, []byte(r.Route))
	if r.Upstream.IsValid() {
		b = append(b, `,"upstream":"`...)
		b = r.Upstream.AppendTo(b)
		b = append(b, `","bytes_up":`...)
	} else {
		b = append(b, `,"upstream":null,"bytes_up":`...)
	}
	b = strconv.AppendInt(b, r.Up, 10)
	b = append(b, `,"bytes_down":`...)
	b = strconv.AppendInt(b, r.Down, 10)
	b = append(b, `,"duration":`...)
	b = appendSeconds(b, dur)
	return append(b, "}\n"...)
}
