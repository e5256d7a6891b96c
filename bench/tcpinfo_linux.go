package bench

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// readTCPInfo reads the socket's TCP_INFO. tcpi_bytes_received is there
// since Linux 4.1 and tcpi_rcv_ooopack since Linux 5.4; an older kernel
// fills a shorter struct and they read as zero.
func readTCPInfo(raw syscall.RawConn) (tcpReading, error) {
	var ti *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		ti, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return tcpReading{}, err
	}
	if serr != nil {
		return tcpReading{}, os.NewSyscallError("getsockopt TCP_INFO", serr)
	}
	return tcpReading{
		retrans:  ti.Total_retrans,
		ooo:      ti.Rcv_ooopack,
		received: ti.Bytes_received,
		rtt:      ti.Rtt,
		rttvar:   ti.Rttvar,
	}, nil
}
