package proxyproto

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/nginxtest"
)

func TestAppendV2Layout(t *testing.T) {
	src := netip.MustParseAddrPort("192.0.2.10:51000")
	dst := netip.MustParseAddrPort("198.51.100.1:443")
	got := AppendV2(nil, TCP, src, dst)
	want := append(append([]byte{}, signature...), 0x21, 0x11, 0, 12, 192, 0, 2, 10, 198, 51, 100, 1, 0xc7, 0x38, 0x01, 0xbb)
	if !bytes.Equal(got, want) {
		t.Errorf("IPv4 TCP:\n got %x\nwant %x", got, want)
	}
	v6 := AppendV2(nil, UDP, netip.MustParseAddrPort("[2001:db8::1]:4433"), netip.MustParseAddrPort("198.51.100.1:443"))
	if len(v6) != 16+36 || v6[13] != 0x22 || v6[15] != 36 {
		t.Errorf("mixed families, UDP: %x", v6)
	}
	if local := AppendV2(nil, TCP, netip.AddrPort{}, dst); !bytes.Equal(local[12:], []byte{0x20, 0, 0, 0}) {
		t.Errorf("LOCAL: %x", local)
	}
}

// TestNginxReadsIt: nginx, listening with proxy_protocol, takes the
// header for what it is and reports the addresses in it.
func TestNginxReadsIt(t *testing.T) {
	addr := nginxtest.Start(t, `
    server {
        listen %[2]s proxy_protocol;
        location / { return 200 "$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port"; }
    }`)
	ask := func(header []byte) (string, error) {
		var c net.Conn
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if c, err = net.Dial("tcp", addr); err == nil {
				break
			}
		}
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(append(header, "GET / HTTP/1.0\r\n\r\n"...))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b), nil
	}
	for _, tc := range []struct{ src, dst, want string }{
		{"192.0.2.10:51000", "198.51.100.1:443", "200 192.0.2.10 51000 198.51.100.1 443"},
		{"[2001:db8::7]:40000", "[2001:db8::1]:8443", "200 2001:DB8::7 40000 2001:DB8::1 8443"},
	} {
		got, err := ask(AppendV2(nil, TCP, netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.EqualFold(got, tc.want) {
			t.Errorf("%s -> %s: nginx answered %q, want %q", tc.src, tc.dst, got, tc.want)
		}
	}
	// Without the header nginx refuses the connection: the test would
	// catch a header it skipped as garbage.
	if got, err := ask(nil); err == nil {
		t.Errorf("nginx answered %q without a PROXY header", got)
	}
}
