package wt_test

import (
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mediaship/engine/wt"
)

// TestFairShareSessions: at max_sessions, a session from an address
// holding none closes (0x109) the session that moved nothing for
// longest of the address holding them all, and one from that address
// itself gets 503.
func TestFairShareSessions(t *testing.T) {
	base, _ := serve(t, "[webtransport]\nenabled = true\nmax_sessions = 2\nmax_sessions_per_address = 2\n")
	ctx := ctxFor(t)
	var heavy []*wt.ClientSession
	for i := range 2 {
		s, rsp, err := wt.Dial(ctx, base+"?mode=echo", insecure, nil)
		if err != nil {
			t.Fatalf("session %d: %v %v", i+1, rsp, err)
		}
		defer s.Close(0, "done")
		heavy = append(heavy, s)
	}
	if s, rsp, err := wt.Dial(ctx, base+"?mode=echo", insecure, nil); s != nil || err == nil || rsp == nil || rsp.StatusCode != 429 && rsp.StatusCode != 503 {
		t.Fatalf("a third session from the address holding both: %v, %v; want 429 or 503", rsp, err)
	}
	// Another address: 127.0.0.3.
	u, _ := url.Parse(base)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	ua, _ := net.ResolveUDPAddr("udp", u.Host)
	tc := insecure.Clone()
	tc.NextProtos = []string{"h3"}
	qc, err := tr.Dial(ctx, ua, tc, &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := wt.NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, rsp, err := cc.Dial(ctx, base+"?mode=echo", nil)
	if err != nil {
		t.Fatalf("a session from an address holding none: %v, %v", rsp, err)
	}
	defer s.Close(0, "done")
	// One of the heavy address's sessions was closed with 0x109, the
	// first (it moved nothing for longest).
	select {
	case <-heavy[0].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no session of the address holding them all was closed")
	}
	var se *wt.SessionError
	if !errors.As(heavy[0].Err(), &se) || !se.Remote || se.Code != wt.CodeFairShare {
		t.Errorf("the closed session: %v, want the server's 0x109", heavy[0].Err())
	}
	select {
	case <-heavy[1].Done():
		t.Error("both of the heavy address's sessions were closed")
	default:
	}
}
