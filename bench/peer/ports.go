package peer

import (
	"fmt"
	"io"
	"net"
	"strconv"
)

// FreePorts returns one port on 127.0.0.1 per element of udp, free for
// TCP and, where udp[i] is true, for UDP at the same number too (a server
// that speaks HTTP/3 on its TLS port's number). The ports are free when
// chosen, and distinct; a server may still lose one to another process
// before it binds it, which its caller answers by choosing again.
func FreePorts(udp ...bool) ([]int, error) {
	return choosePorts(udp, func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
}

// choosePorts is FreePorts with the source of TCP candidates as a
// parameter, for tests. Every socket stays open until all ports are
// chosen, so no port is handed out twice and a candidate whose UDP side
// was taken is not offered again.
func choosePorts(udp []bool, candidate func() (net.Listener, error)) ([]int, error) {
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	ports := make([]int, 0, len(udp))
	for _, needUDP := range udp {
		const tries = 50
		for try := 1; ; try++ {
			if try > tries {
				return nil, fmt.Errorf("no port on 127.0.0.1 free for both TCP and UDP in %d tries", tries)
			}
			l, err := candidate()
			if err != nil {
				return nil, fmt.Errorf("choose a free port: %w", err)
			}
			held = append(held, l)
			port := l.Addr().(*net.TCPAddr).Port
			if needUDP {
				u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err != nil {
					continue // UDP taken: this TCP socket stays held, so the next candidate differs
				}
				held = append(held, u)
			}
			ports = append(ports, port)
			break
		}
	}
	return ports, nil
}
