package h2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// peer is a client made of x/net's Framer and hpack, talking to a Conn
// through memory.
type peer struct {
	t       *testing.T
	c       *Conn
	h       *handler
	toSrv   bytes.Buffer
	fromSrv bytes.Buffer
	fr      *http2.Framer // writes to toSrv
	rfr     *http2.Framer // reads fromSrv
	enc     *hpack.Encoder
	encBuf  bytes.Buffer
	dec     *hpack.Decoder
	now     int64
	events  []Event
	refuse  uint32 // the sink fails this stream's body after its first frame
	err     error  // the connection error Feed returned
}

type handler struct {
	c      *Conn
	body   []byte
	auto   bool // respond 200 with body to every request
	reqs   []*Stream
	done   []*Stream
	status int
}

func (h *handler) Request(st *Stream) {
	h.reqs = append(h.reqs, st)
	if h.auto {
		st.User = h.body
		h.c.Respond(st, 200, []hpack.HeaderField{{Name: "content-length", Value: fmt.Sprint(len(h.body))}}, int64(len(h.body)))
	}
}

func (h *handler) StreamDone(st *Stream) { h.done = append(h.done, st) }

type sink struct {
	w      *bytes.Buffer
	refuse uint32 // a stream whose body fails from its second frame on
}

func (s sink) Bytes(p []byte) { s.w.Write(p) }
func (s sink) Data(st *Stream, hdr []byte, off int64, n int) bool {
	if st.ID == s.refuse && off > 0 {
		return false
	}
	s.w.Write(hdr)
	s.w.Write(st.User.([]byte)[off : off+int64(n)])
	return true
}

func newPeer(t *testing.T, cfg Config, body []byte, settings ...http2.Setting) *peer {
	p := &peer{t: t, now: 1}
	cfg.OnEvent = func(e Event, _ error) { p.events = append(p.events, e) }
	p.h = &handler{body: body, auto: true}
	p.c = NewConn(cfg, p.h)
	p.h.c = p.c
	p.fr = http2.NewFramer(&p.toSrv, nil)
	p.rfr = http2.NewFramer(nil, &p.fromSrv)
	p.rfr.SetMaxReadFrameSize(1 << 24)
	p.enc = hpack.NewEncoder(&p.encBuf)
	p.dec = hpack.NewDecoder(4096, nil)
	p.toSrv.WriteString(Preface)
	p.fr.WriteSettings(settings...)
	p.flush()
	// The server's SETTINGS, its connection WINDOW_UPDATE and the ACK.
	if f := p.next(); f.Header().Type != http2.FrameSettings {
		t.Fatalf("first server frame %v", f.Header())
	}
	return p
}

// flush feeds everything the client wrote and collects the output.
func (p *peer) flush() {
	in := p.toSrv.Bytes()
	n, err := p.c.Feed(in, p.now)
	p.toSrv.Next(n)
	if err != nil && p.err == nil {
		p.err = err
	}
	for p.c.Produce(sink{&p.fromSrv, p.refuse}, 1<<20) > 0 {
	}
}

// next reads the next frame the server produced, or nil.
func (p *peer) next() http2.Frame {
	p.t.Helper()
	if p.fromSrv.Len() == 0 {
		return nil
	}
	f, err := p.rfr.ReadFrame()
	if err != nil {
		p.t.Fatalf("reading server output: %v", err)
	}
	return f
}

// frames reads all pending server frames, summarised.
func (p *peer) frames() []string {
	var out []string
	for f := p.next(); f != nil; f = p.next() {
		out = append(out, summary(f))
		if h, ok := f.(*http2.HeadersFrame); ok {
			p.dec.DecodeFull(h.HeaderBlockFragment())
		}
	}
	return out
}

func summary(f http2.Frame) string {
	h := f.Header()
	switch f := f.(type) {
	case *http2.RSTStreamFrame:
		return fmt.Sprintf("RST_STREAM %d %v", h.StreamID, f.ErrCode)
	case *http2.GoAwayFrame:
		return fmt.Sprintf("GOAWAY %d %v", f.LastStreamID, f.ErrCode)
	case *http2.DataFrame:
		end := ""
		if f.StreamEnded() {
			end = " END"
		}
		return fmt.Sprintf("DATA %d %d%s", h.StreamID, len(f.Data()), end)
	case *http2.HeadersFrame:
		return fmt.Sprintf("HEADERS %d", h.StreamID)
	}
	return fmt.Sprintf("%v %d", h.Type, h.StreamID)
}

func (p *peer) request(id uint32, end bool, fields ...string) {
	p.encBuf.Reset()
	if len(fields) == 0 {
		fields = []string{":method", "GET", ":scheme", "https", ":path", "/f", ":authority", "x"}
	}
	for i := 0; i+1 < len(fields); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.encBuf.Bytes(), EndStream: end, EndHeaders: true})
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}

func TestRequestResponse(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 3000) // 48000 bytes
	p := newPeer(t, Config{}, body)
	p.frames()
	p.request(1, true)
	p.flush()
	got := p.frames()
	want := []string{"HEADERS 1", "DATA 1 16384", "DATA 1 16384", "DATA 1 15232 END"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("frames %v, want %v", got, want)
	}
	if len(p.h.done) != 1 || p.h.done[0].Reset {
		t.Errorf("stream done %v", p.h.done)
	}
	if p.c.Open() != 0 {
		t.Errorf("open streams %d", p.c.Open())
	}
}

// TestBodyFails: a body that cannot give its bytes (a file that shrank)
// resets its own stream with INTERNAL_ERROR, right away; the other
// stream's response completes, and the connection stays up.
func TestBodyFails(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 3000) // 48000 bytes
	p := newPeer(t, Config{}, body)
	p.frames()
	p.refuse = 1
	p.request(1, true)
	p.request(3, true)
	p.flush()
	got := strings.Join(p.frames(), ",")
	if !strings.Contains(got, "RST_STREAM 1 INTERNAL_ERROR") || !strings.Contains(got, "DATA 3 15232 END") ||
		strings.Contains(got, "GOAWAY") || strings.Count(got, "DATA 1 ") != 1 {
		t.Fatalf("frames %s", got)
	}
	if p.c.Dead() || p.c.Open() != 0 {
		t.Errorf("dead %v, open streams %d", p.c.Dead(), p.c.Open())
	}
	for _, st := range p.h.done {
		if st.ID == 1 && (!st.Reset || st.ResetCode != http2.ErrCodeInternal) {
			t.Errorf("stream 1 done without its reset: %+v", st)
		}
	}
}

// TestFlowControl: a client granting 1 KiB at a time gets 1 KiB frames,
// and nothing past its windows.
func TestFlowControl(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 5000)
	p := newPeer(t, Config{}, body, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1024})
	p.frames()
	p.request(1, true)
	p.flush()
	if got := p.frames(); strings.Join(got, ",") != "HEADERS 1,DATA 1 1024" {
		t.Fatalf("first frames %v", got)
	}
	sent := 1024
	for sent < len(body) {
		p.fr.WriteWindowUpdate(1, 1024)
		p.flush()
		got := p.frames()
		n := min(1024, len(body)-sent)
		want := fmt.Sprintf("DATA 1 %d", n)
		if sent+n == len(body) {
			want += " END"
		}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("after %d: frames %v, want %s", sent, got, want)
		}
		sent += n
	}
	// A SETTINGS change moves open windows (RFC 9113 §6.9.2), even below 0.
	p.request(3, true)
	p.flush()
	p.frames()
	p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	p.flush()
	p.fr.WriteWindowUpdate(3, 500)
	p.flush()
	if got := p.frames(); contains(got, "DATA 3 500") {
		t.Errorf("sent past a window made negative: %v", got)
	}
	// A window past 2^31-1 is a FLOW_CONTROL_ERROR.
	p.fr.WriteWindowUpdate(0, 1<<31-1)
	p.flush()
	if got := p.frames(); !contains(got, "GOAWAY 3 FLOW_CONTROL_ERROR") {
		t.Errorf("connection window overflow: %v", got)
	}
}

// TestWindowUpdatesWithData: a client that credits its stream and its
// connection after every DATA frame it reads (two WINDOW_UPDATE frames a
// frame, thousands in all) is well within the limit: it is not a flood.
func TestWindowUpdatesWithData(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 3000*1024)
	p := newPeer(t, Config{}, body, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1024})
	p.frames()
	p.request(1, true)
	p.flush()
	got := p.frames()
	frames := 0
	for {
		data := 0
		for _, f := range got {
			if strings.HasPrefix(f, "DATA 1") {
				data++
			}
			if strings.HasPrefix(f, "GOAWAY") {
				t.Fatalf("after %d DATA frames: %s", frames, f)
			}
		}
		if data == 0 {
			break
		}
		frames += data
		for range data {
			p.fr.WriteWindowUpdate(1, 1024)
			p.fr.WriteWindowUpdate(0, 1024)
		}
		p.flush()
		if strings.HasSuffix(got[len(got)-1], "END") {
			break
		}
		got = p.frames()
	}
	if frames != 3000 {
		t.Fatalf("%d DATA frames, want 3000", frames)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	p := newPeer(t, Config{MaxConcurrentStreams: 2}, bytes.Repeat([]byte{1}, 100), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	p.frames()
	p.request(1, true)
	p.request(3, true)
	p.request(5, true)
	p.flush()
	got := p.frames()
	if !contains(got, "RST_STREAM 5 REFUSED_STREAM") || contains(got, "RST_STREAM 3 REFUSED_STREAM") {
		t.Errorf("frames %v", got)
	}
}

func TestRapidReset(t *testing.T) {
	p := newPeer(t, Config{}, nil)
	p.h.auto = false // requests stay unanswered, as if slow
	p.frames()
	for id := uint32(1); id < 2000; id += 2 {
		p.request(id, true)
		p.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	p.flush()
	got := p.frames()
	if !contains(got, fmt.Sprintf("GOAWAY %d ENHANCE_YOUR_CALM", 2*resetBurst+1)) && p.err == nil {
		t.Fatalf("no GOAWAY after a reset flood: %v", got[len(got)-3:])
	}
	var ce *ConnError
	if !errors.As(p.err, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm || !hasEvent(p.events, EventRapidReset) {
		t.Errorf("err %v events %v", p.err, p.events)
	}
	// A well-spaced trickle of resets is fine.
	q := newPeer(t, Config{}, nil)
	q.h.auto = false
	for id := uint32(1); id < 2000; id += 2 {
		q.request(id, true)
		q.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		q.now += 1e9 / resetPerSec
		q.flush()
	}
	if q.err != nil {
		t.Errorf("resets at the allowed rate: %v", q.err)
	}
}

// TestBusyResetStreamsCount: a reset stream whose work is still running
// holds its concurrency slot until WorkDone.
func TestBusyResetStreamsCount(t *testing.T) {
	p := newPeer(t, Config{MaxConcurrentStreams: 1}, nil)
	p.h.auto = false
	p.frames()
	p.request(1, true)
	p.flush()
	p.c.MarkBusy(p.h.reqs[0])
	p.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	p.request(3, true)
	p.flush()
	if got := p.frames(); !contains(got, "RST_STREAM 3 REFUSED_STREAM") {
		t.Fatalf("frames %v", got)
	}
	p.c.WorkDone(p.h.reqs[0])
	p.request(5, true)
	p.flush()
	if got := p.frames(); contains(got, "RST_STREAM 5 REFUSED_STREAM") || len(p.h.reqs) != 2 {
		t.Fatalf("after WorkDone: frames %v, requests %d", got, len(p.h.reqs))
	}
}

func hasEvent(list []Event, e Event) bool {
	for _, x := range list {
		if x == e {
			return true
		}
	}
	return false
}

func TestFloods(t *testing.T) {
	for _, tt := range []struct {
		name  string
		send  func(p *peer)
		event Event
	}{
		{"ping", func(p *peer) {
			for i := 0; i < 5000; i++ {
				p.fr.WritePing(false, [8]byte{})
			}
		}, EventControlFlood},
		{"settings", func(p *peer) {
			for i := 0; i < 5000; i++ {
				p.fr.WriteSettings()
			}
		}, EventControlFlood},
		{"window update", func(p *peer) {
			for i := 0; i < 5000; i++ {
				p.fr.WriteWindowUpdate(0, 1)
			}
		}, EventControlFlood},
		{"empty data", func(p *peer) {
			p.request(1, false)
			for i := 0; i < 5000; i++ {
				p.fr.WriteData(1, false, nil)
			}
		}, EventControlFlood},
		{"continuation", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: false})
			for i := 0; i < 1000; i++ {
				p.fr.WriteContinuation(1, false, nil)
			}
		}, EventContinuationFlood},
		{"big header block", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: false})
			lit := append([]byte{0x40, 0x01, 'x', 0x7f, 0x81, 0x7f}, bytes.Repeat([]byte{'a'}, 16000)...) // literal x: a*16000+...
			for i := 0; i < 6; i++ {
				p.fr.WriteContinuation(1, false, lit)
			}
		}, EventContinuationFlood},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPeer(t, Config{}, nil)
			p.frames()
			tt.send(p)
			p.flush()
			var ce *ConnError
			if !errors.As(p.err, &ce) || !hasEvent(p.events, tt.event) {
				t.Fatalf("err %v, events %v", p.err, p.events)
			}
			if got := p.frames(); len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "GOAWAY") {
				t.Errorf("last frames %v", got[max(0, len(got)-2):])
			}
		})
	}
}

// TestQueuedControlBound: a client that sends PINGs and never reads is
// cut off when the acknowledgements pile up.
func TestQueuedControlBound(t *testing.T) {
	p := newPeer(t, Config{MaxQueuedControl: 1000}, nil)
	p.frames()
	for i := 0; i < 100; i++ {
		p.fr.WritePing(false, [8]byte{})
	}
	n, err := p.c.Feed(p.toSrv.Bytes(), 2) // no Produce: nothing is read
	_ = n
	if !hasEvent(p.events, EventQueueFlood) || err == nil {
		t.Fatalf("err %v events %v", err, p.events)
	}
}

func TestHPACKBomb(t *testing.T) {
	p := newPeer(t, Config{MaxHeaderListSize: 8 << 10}, []byte("ok"))
	p.frames()
	// One 4000-byte field in the dynamic table, then referenced many times:
	// a few bytes on the wire, megabytes decoded.
	p.encBuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", "x"}} {
		p.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	p.enc.WriteField(hpack.HeaderField{Name: "x-big", Value: strings.Repeat("b", 4000)})
	block := bytes.Clone(p.encBuf.Bytes())
	for i := 0; i < 1000; i++ {
		block = append(block, 0x80|62) // indexed: dynamic entry 1
	}
	p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:min(len(block), 16000)], EndStream: true, EndHeaders: true})
	p.flush()
	if p.err != nil || !hasEvent(p.events, EventHeaderTooLarge) {
		t.Fatalf("err %v events %v", p.err, p.events)
	}
	got := p.frames()
	if !contains(got, "HEADERS 1") {
		t.Fatalf("frames %v", got)
	}
	// The connection goes on, HPACK state intact.
	p.request(3, true)
	p.flush()
	if got := p.frames(); !contains(got, "DATA 3 2 END") {
		t.Errorf("next request: %v", got)
	}
}

func TestMalformed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		fields []string
	}{
		{"uppercase", []string{":method", "GET", ":scheme", "https", ":path", "/", "X-Up", "1"}},
		{"connection", []string{":method", "GET", ":scheme", "https", ":path", "/", "connection", "keep-alive"}},
		{"te", []string{":method", "GET", ":scheme", "https", ":path", "/", "te", "gzip"}},
		{"no path", []string{":method", "GET", ":scheme", "https"}},
		{"empty path", []string{":method", "GET", ":scheme", "https", ":path", ""}},
		{"pseudo after regular", []string{":method", "GET", "accept", "*/*", ":scheme", "https", ":path", "/"}},
		{"repeated pseudo", []string{":method", "GET", ":method", "GET", ":scheme", "https", ":path", "/"}},
		{"response pseudo", []string{":method", "GET", ":scheme", "https", ":path", "/", ":status", "200"}},
		{"value with newline", []string{":method", "GET", ":scheme", "https", ":path", "/", "x", "a\nb"}},
		{"content-length mismatch", []string{":method", "GET", ":scheme", "https", ":path", "/", "content-length", "5"}},
		{"host differs", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a", "host", "b"}},
		{"repeated host", []string{":method", "GET", ":scheme", "https", ":path", "/", "host", "a.test", "host", "b.test"}},
		{"repeated host, same", []string{":method", "GET", ":scheme", "https", ":path", "/", "host", "a.test", "host", "a.test"}},
		{"host differs, second", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a", "host", "a", "host", "b"}},
		{"space in path", []string{":method", "GET", ":scheme", "https", ":path", "/a b"}},
		{"fragment in path", []string{":method", "GET", ":scheme", "https", ":path", "/x#f"}},
		{"relative path", []string{":method", "GET", ":scheme", "https", ":path", "x"}},
		{"asterisk for GET", []string{":method", "GET", ":scheme", "https", ":path", "*"}},
		{"other scheme", []string{":method", "GET", ":scheme", "javascript", ":path", "/"}},
		{"space in authority", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "evil com"}},
		{"userinfo", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x@a.test"}},
		{"authority list", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a.test,b.test"}},
		{"bad port", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a.test:abc"}},
		{"bad host", []string{":method", "GET", ":scheme", "https", ":path", "/", "host", "a b"}},
		{"port out of range", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a.test:99999"}},
		{"bad method", []string{":method", "G(T", ":scheme", "https", ":path", "/"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPeer(t, Config{}, []byte("x"))
			p.frames()
			p.request(1, true, tt.fields...)
			p.flush()
			if got := p.frames(); !contains(got, "RST_STREAM 1 PROTOCOL_ERROR") || len(p.h.reqs) != 0 {
				t.Fatalf("frames %v, requests %d", got, len(p.h.reqs))
			}
			if p.err != nil {
				t.Errorf("a malformed request ended the connection: %v", p.err)
			}
		})
	}
}

func TestProtocolErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		send func(p *peer)
		want string
	}{
		{"even stream", func(p *peer) { p.request(2, true) }, "GOAWAY 0 PROTOCOL_ERROR"},
		{"data on idle", func(p *peer) { p.fr.WriteData(5, true, []byte("x")) }, "GOAWAY 0 PROTOCOL_ERROR"},
		{"decreasing id", func(p *peer) { p.request(5, true); p.request(3, true) }, "GOAWAY 5 PROTOCOL_ERROR"},
		{"bad hpack", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true, EndStream: true})
		}, "GOAWAY 1 COMPRESSION_ERROR"},
		{"push promise", func(p *peer) {
			p.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, EndHeaders: true})
		}, "GOAWAY 0 PROTOCOL_ERROR"},
		{"frame too large", func(p *peer) { p.fr.WriteRawFrame(http2.FrameData, 0, 1, make([]byte, 20000)) }, "GOAWAY 0 FRAME_SIZE_ERROR"},
		{"bad max frame size", func(p *peer) { p.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 100}) }, "GOAWAY 0 PROTOCOL_ERROR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPeer(t, Config{}, []byte("x"))
			p.frames()
			tt.send(p)
			p.flush()
			if got := p.frames(); !contains(got, tt.want) {
				t.Fatalf("frames %v, want %s", got, tt.want)
			}
			if p.err == nil || !p.c.Dead() {
				t.Errorf("no connection error")
			}
		})
	}
	// Not a preface at all.
	c := NewConn(Config{}, &handler{})
	if _, err := c.Feed([]byte("GET / HTTP/1.1\r\n\r\n"), 1); err == nil {
		t.Error("HTTP/1.1 accepted as a preface")
	}
}

func TestPriorities(t *testing.T) {
	body := bytes.Repeat([]byte{1}, 40000)
	p := newPeer(t, Config{}, body)
	p.h.auto = false
	p.fr.WriteWindowUpdate(0, 1<<20)
	p.frames()
	get := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x"}
	p.request(1, true, append(get, "priority", "u=5")...)
	p.request(3, true, append(get, "priority", "u=1")...)
	p.request(5, true, append(get, "priority", "u=4, i")...)
	p.request(7, true, append(get, "priority", "u=4,i")...)
	p.flush()
	for _, st := range p.h.reqs {
		st.User = body
		p.c.Respond(st, 200, nil, int64(len(body)))
	}
	p.flush()
	var order []uint32
	for _, f := range p.frames() {
		var id uint32
		if _, err := fmt.Sscanf(f, "DATA %d", &id); err == nil {
			order = append(order, id)
		}
	}
	want := []uint32{3, 3, 3, 5, 7, 5, 7, 5, 7, 1, 1, 1}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("DATA order %v, want %v", order, want)
	}
	// PRIORITY_UPDATE before the stream opens is kept for it.
	p.fr.WritePriorityUpdate(9, "u=0")
	p.request(9, true)
	p.flush()
	if st := p.h.reqs[len(p.h.reqs)-1]; st.Priority.Urgency != 0 {
		t.Errorf("priority of 9: %+v", st.Priority)
	}
}

func TestParsePriority(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Priority
	}{
		{"", DefaultPriority},
		{"u=0", Priority{0, false}},
		{"u=7, i", Priority{7, true}},
		{"i=?1,u=2", Priority{2, true}},
		{"i=?0", Priority{3, false}},
		{"u=9", Priority{3, false}}, // out of range: ignored
		{"u=1;x=y, foo=bar", Priority{1, false}},
		{"u=1,", DefaultPriority}, // not a dictionary
		{"U=1", DefaultPriority},  // keys are lowercase
	} {
		if got := ParsePriority([]byte(tt.in), DefaultPriority); got != tt.want {
			t.Errorf("ParsePriority(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestStall(t *testing.T) {
	p := newPeer(t, Config{}, bytes.Repeat([]byte{1}, 100), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	p.frames()
	p.request(1, true)
	p.flush()
	p.frames()
	p.now += 5e9
	if err := p.c.Expire(p.now, 10e9, 10e9); err != nil {
		t.Fatal(err)
	}
	p.flush()
	if got := p.frames(); len(got) != 0 {
		t.Fatalf("reset too early: %v", got)
	}
	p.now += 6e9
	p.c.Expire(p.now, 10e9, 10e9)
	p.flush()
	if got := p.frames(); !contains(got, "RST_STREAM 1 CANCEL") {
		t.Fatalf("frames %v", got)
	}
	// The connection serves on.
	p.request(3, true, ":method", "HEAD", ":scheme", "https", ":path", "/", ":authority", "x")
	p.flush()
	if p.c.Dead() || len(p.h.reqs) != 2 {
		t.Errorf("connection after a stalled stream: dead %v, requests %d", p.c.Dead(), len(p.h.reqs))
	}
}

// TestStallTrickle: a window reopened a byte at a time is still a stall:
// the stream is reset at the stall timeout however often credit comes.
// Credit that lets it send stallProgress bytes stops the clock.
func TestStallTrickle(t *testing.T) {
	p := newPeer(t, Config{}, bytes.Repeat([]byte{1}, 100<<10), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	p.frames()
	p.request(1, true)
	p.flush()
	p.frames()
	for i := 0; i < 6; i++ {
		p.now += 2e9
		p.fr.WriteWindowUpdate(1, 1)
		p.flush()
		p.c.Expire(p.now, 10e9, 10e9)
		p.flush()
	}
	if got := p.frames(); !contains(got, "RST_STREAM 1 CANCEL") {
		t.Fatalf("a trickled window was not reset: %v", got)
	}

	p = newPeer(t, Config{}, bytes.Repeat([]byte{1}, 100<<10), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	p.frames()
	p.request(1, true)
	p.flush()
	for i := 0; i < 12; i++ {
		p.now += 2e9
		p.fr.WriteWindowUpdate(1, 8<<10) // 16 KiB every 4 s: slow, but moving
		p.flush()
		p.c.Expire(p.now, 10e9, 10e9)
		p.flush()
	}
	if got := p.frames(); contains(got, "RST_STREAM 1 CANCEL") {
		t.Fatalf("a slow but steady window was reset: %v", got)
	}
}

// TestStallRotate: streams with shut windows opened one after another, each
// reset at the stall timeout with the next already waiting, cannot keep a
// connection that sends nothing: it ends once no response has progressed
// for the timeout.
func TestStallRotate(t *testing.T) {
	p := newPeer(t, Config{}, bytes.Repeat([]byte{1}, 100<<10), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	p.frames()
	for i, id := 0, uint32(1); i < 15 && !p.c.Dead(); i++ {
		if i%4 == 0 {
			p.request(id, true)
			id += 2
		}
		p.now += 2e9
		p.flush()
		p.c.Expire(p.now, 10e9, 10e9)
		p.flush()
	}
	if !p.c.Dead() {
		t.Fatal("a connection cycling stalled streams lived on")
	}
}

// TestProvokedResets: resets the server must send for the client's
// errors (MadeYouReset, CVE-2025-8671) cost from the rapid-reset budget.
func TestProvokedResets(t *testing.T) {
	p := newPeer(t, Config{}, []byte("x"))
	p.frames()
	p.fr.AllowIllegalWrites = true
	for id := uint32(1); id < 2000 && !p.c.Dead(); id += 2 {
		p.request(id, true)
		p.fr.WriteWindowUpdate(id, 0) // a zero increment: PROTOCOL_ERROR on the stream
		p.flush()
	}
	if !p.c.Dead() {
		t.Fatal("a flood of provoked resets did not end the connection")
	}
	if got := p.frames(); len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "GOAWAY") || !strings.HasSuffix(got[len(got)-1], "ENHANCE_YOUR_CALM") {
		t.Errorf("last frames %v", got[max(0, len(got)-3):])
	}
}

func TestShutdown(t *testing.T) {
	p := newPeer(t, Config{}, bytes.Repeat([]byte{1}, 100), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 50})
	p.frames()
	p.request(1, true)
	p.flush()
	p.c.Shutdown()
	p.request(3, true)
	p.flush()
	got := p.frames()
	if !contains(got, "GOAWAY 1 NO_ERROR") || !contains(got, "RST_STREAM 3 REFUSED_STREAM") {
		t.Fatalf("frames %v", got)
	}
	if p.c.Finished() {
		t.Fatal("finished with stream 1 open")
	}
	p.fr.WriteWindowUpdate(1, 50)
	p.flush()
	p.frames()
	if !p.c.Finished() {
		t.Error("not finished after the last stream")
	}
}

func TestTrailersAndBodies(t *testing.T) {
	p := newPeer(t, Config{}, []byte("x"))
	p.frames()
	// A POST answered before its body arrived: the stream stays
	// half-closed (local) and its body and trailers are still checked.
	p.request(1, false, ":method", "POST", ":scheme", "https", ":path", "/", ":authority", "x", "content-length", "3")
	p.flush()
	if got := p.frames(); contains(got, "RST_STREAM 1 NO_ERROR") || !contains(got, "DATA 1 1 END") {
		t.Fatalf("frames %v", got)
	}
	p.fr.WriteData(1, false, []byte("abc"))
	p.encBuf.Reset()
	p.enc.WriteField(hpack.HeaderField{Name: ":path", Value: "/"})
	p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.encBuf.Bytes(), EndStream: true, EndHeaders: true})
	p.flush()
	if got := p.frames(); !contains(got, "RST_STREAM 1 PROTOCOL_ERROR") {
		t.Errorf("pseudo-header in trailers: %v", got)
	}
	// A body that keeps coming after the answer is stopped without error.
	p.request(3, false, ":method", "POST", ":scheme", "https", ":path", "/", ":authority", "x")
	p.flush()
	p.frames()
	for i := 0; i < 3; i++ {
		p.fr.WriteData(3, false, make([]byte, 16000))
	}
	p.flush()
	if got := p.frames(); !contains(got, "RST_STREAM 3 NO_ERROR") || p.err != nil {
		t.Errorf("frames %v err %v", got, p.err)
	}
	// Its frames still in flight are ignored, not an error.
	p.fr.WriteData(3, true, []byte("abc"))
	p.flush()
	if got := p.frames(); len(got) != 0 || p.err != nil {
		t.Errorf("frames %v err %v", got, p.err)
	}
	// DATA on a stream whose request ended is STREAM_CLOSED.
	p.h.auto = false
	p.request(5, true)
	p.flush()
	p.fr.WriteData(5, false, []byte("x"))
	p.flush()
	if got := p.frames(); !contains(got, "RST_STREAM 5 STREAM_CLOSED") {
		t.Errorf("frames %v", got)
	}
	// After the client's own RST_STREAM, DATA is STREAM_CLOSED even on a
	// stream we had reset.
	p.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	p.fr.WriteData(3, false, []byte("x"))
	p.flush()
	if got := p.frames(); !contains(got, "RST_STREAM 3 STREAM_CLOSED") {
		t.Errorf("frames %v", got)
	}
}

// FuzzFrames feeds arbitrary frames after a valid preface and SETTINGS:
// the Conn never panics, and everything it produces parses as frames.
func FuzzFrames(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	enc := hpack.NewEncoder(&bytes.Buffer{})
	_ = enc
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82, 0x87, 0x84, 0x41, 0x01, 'x'}, EndStream: true, EndHeaders: true})
	fr.WriteWindowUpdate(0, 1000)
	fr.WritePing(false, [8]byte{1})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	fr.WritePriorityUpdate(3, "u=1")
	fr.WriteData(1, true, []byte("abc"))
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 1, 9, 4, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		h := &handler{body: []byte("0123456789"), auto: true}
		c := NewConn(Config{MaxConcurrentStreams: 4}, h)
		h.c = c
		var out bytes.Buffer
		start := append([]byte(Preface), 0, 0, 0, 4, 0, 0, 0, 0, 0)
		c.Feed(start, 1)
		for i := 0; len(in) > 0 && i < 100; i++ {
			n, err := c.Feed(in, int64(i+2))
			in = in[n:]
			for c.Produce(sink{w: &out}, 1<<16) > 0 {
			}
			if err != nil || n == 0 {
				break
			}
		}
		c.Expire(1e12, 1, 1)
		for c.Produce(sink{w: &out}, 1<<16) > 0 {
		}
		r := http2.NewFramer(nil, &out)
		r.SetMaxReadFrameSize(1 << 24)
		r.AllowIllegalReads = true
		for {
			_, err := r.ReadFrame()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("output does not parse: %v", err)
			}
		}
	})
}

// FuzzParsePriority: any field value gives a valid priority.
func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{"u=1", "u=7, i", "i=?0;a=b, u=2", ",", "u=", "*x=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p := ParsePriority([]byte(s), DefaultPriority); p.Urgency > 7 {
			t.Fatalf("ParsePriority(%q) = %+v", s, p)
		}
	})
}
