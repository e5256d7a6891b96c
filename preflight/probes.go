package preflight

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"

	"github.com/mediaship/engine/internal/reuseport"
	"github.com/mediaship/engine/ktls"
)

// kernel is everything the probes ask of the operating system: the seam
// through which tests hand the probes any errno without root or a special
// kernel. Methods return raw errnos (syscall.Errno), not wrapped ones.
type kernel interface {
	release() string
	tcpPair() (a, b int, err error)
	udpSocket() (int, error)
	closeFd(fd int)
	setULP(fd int) error
	setTX(fd int, k ktls.Keys, seq uint64) error
	sendRecord(fd int, typ byte, data []byte) error
	write(fd int, b []byte) error
	shutdownWrite(fd int) error
	readAll(fd int) ([]byte, error)
	memfd(data []byte) (int, error)
	sendfile(out, in int, n int) error
	setCongestion(fd int, name string) error
	congestion(fd int) (string, error)
	setUDPSegment(fd int, size int) error
	forceBuffers(fd int, size int) (rcv, snd int, err error)
	readFile(path string) ([]byte, error)
	exists(path string) bool
	nofile() (soft, hard uint64, err error)
	steering() error
}

// Prober runs probes against a kernel. The zero value probes this
// machine's kernel.
type Prober struct {
	k kernel
}

func (p *Prober) kern() kernel {
	if p.k == nil {
		p.k = hostKernel()
	}
	return p.k
}

// probeKeys is a fixed key for a probe: any key proves the kernel
// encrypts, and a fixed one makes failures reproducible.
func probeKeys(s ktls.Suite) ktls.Keys {
	k := ktls.Keys{Suite: s, Key: make([]byte, s.KeyLen)}
	for i := range k.Key {
		k.Key[i] = byte(0x11 * (i + 1))
	}
	for i := range k.IV {
		k.IV[i] = byte(0xa5 ^ i)
	}
	return k
}

// probeSeq starts probes at a sequence number other than zero, as a
// promoted connection does.
const probeSeq = 3

// TLSULP probes whether the "tls" upper layer protocol attaches to a TCP
// socket (Linux 4.13, commit 734942cc4ea6; module tls.ko).
func (p *Prober) TLSULP() error {
	k := p.kern()
	a, b, err := k.tcpPair()
	if err != nil {
		return fmt.Errorf("preflight: loopback TCP pair: %w", err)
	}
	defer k.closeFd(a)
	defer k.closeFd(b)
	return p.ulpErr(k.setULP(a))
}

// ulpErr explains a TCP_ULP failure.
func (p *Prober) ulpErr(err error) error {
	if err == nil {
		return nil
	}
	ns := &NotSupportedError{Feature: "kernel TLS", Tried: `setsockopt(TCP_ULP, "tls")`, Err: err, Degrade: "ktls"}
	switch {
	case errors.Is(err, syscall.ENOENT):
		if mod := p.tlsModule(); mod != "" {
			ns.Reason = "the tls module is not loaded and this process may not load it"
			ns.Remedy = "modprobe tls, and add tls to /etc/modules-load.d/engine.conf so it loads at boot"
		} else {
			ns.Reason = "this kernel has no tls module: it was built without CONFIG_TLS"
			ns.Remedy = "run a kernel with CONFIG_TLS=m or y (Debian's and Ubuntu's stock kernels have it)"
		}
	case errors.Is(err, syscall.ENOPROTOOPT):
		ns.Reason = "this kernel has no upper layer protocols on TCP (older than 4.13)"
		ns.Remedy = "run a Linux 5.1 or newer kernel with CONFIG_TLS"
	default:
		return fmt.Errorf(`preflight: setsockopt(TCP_ULP, "tls"): %w`, err)
	}
	return ns
}

// tlsModule returns the path of the running kernel's tls module, if any.
func (p *Prober) tlsModule() string {
	k := p.kern()
	rel := k.release()
	if b, err := k.readFile("/proc/sys/net/ipv4/tcp_available_ulp"); err == nil && bytes.Contains(b, []byte("tls")) {
		return "loaded"
	}
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		p := "/lib/modules/" + rel + "/kernel/net/tls/tls" + ext
		if k.exists(p) {
			return p
		}
	}
	if b, err := k.readFile("/lib/modules/" + rel + "/modules.builtin"); err == nil && bytes.Contains(b, []byte("net/tls/tls.ko")) {
		return "builtin"
	}
	return ""
}

// kTLSPair returns a loopback pair whose first socket sends under s with
// kernel TLS, starting at probeSeq.
func (p *Prober) kTLSPair(s ktls.Suite) (a, b int, err error) {
	k := p.kern()
	if a, b, err = k.tcpPair(); err != nil {
		return -1, -1, fmt.Errorf("preflight: loopback TCP pair: %w", err)
	}
	fail := func(err error) (int, int, error) {
		k.closeFd(a)
		k.closeFd(b)
		return -1, -1, err
	}
	if err := p.ulpErr(k.setULP(a)); err != nil {
		return fail(err)
	}
	if err := k.setTX(a, probeKeys(s), probeSeq); err != nil {
		return fail(txErr(s, err))
	}
	return a, b, nil
}

// txErr explains a TLS_TX failure for suite s.
func txErr(s ktls.Suite, err error) error {
	ns := &NotSupportedError{Feature: "kernel TLS " + s.Name, Tried: "setsockopt(SOL_TLS, TLS_TX, TLS 1.3 " + s.Name + ")", Err: err, Degrade: "ktls"}
	switch {
	case errors.Is(err, syscall.EINVAL):
		// The kernel does not know the cipher or the version: TLS 1.3
		// arrived in 5.1, ChaCha20-Poly1305 in 5.11.
		ns.Reason = "this kernel does not offer this cipher for TLS 1.3"
		ns.Remedy = "run a Linux 5.11 or newer kernel"
	case errors.Is(err, syscall.ENOENT):
		ns.Reason = "the kernel crypto for this cipher is not available"
		mods := "gcm aesni_intel"
		if s.ID == ktls.ChaCha20Poly1305.ID {
			mods = "chacha20poly1305"
		}
		ns.Remedy = "modprobe " + mods + ", and list them in /etc/modules-load.d/engine.conf"
	case errors.Is(err, syscall.ENOPROTOOPT):
		ns.Reason = "the socket has no TLS layer (SOL_TLS unknown)"
		ns.Remedy = "run a kernel with CONFIG_TLS"
	default:
		return fmt.Errorf("preflight: setsockopt(TLS_TX, %s): %w", s.Name, err)
	}
	return ns
}

// KTLS probes kernel TLS transmit for TLS 1.3 with suite s: install a
// known key on one end of a loopback pair, write, and decrypt the record
// that arrives at the other end.
func (p *Prober) KTLS(s ktls.Suite) error {
	k := p.kern()
	a, b, err := p.kTLSPair(s)
	if err != nil {
		return err
	}
	defer k.closeFd(b)
	msg := []byte("engine preflight " + s.Name)
	err = k.write(a, msg)
	if err == nil {
		err = k.shutdownWrite(a)
	}
	k.closeFd(a)
	if err != nil {
		return fmt.Errorf("preflight: write through kernel TLS: %w", err)
	}
	raw, err := k.readAll(b)
	if err != nil {
		return fmt.Errorf("preflight: read the records: %w", err)
	}
	return checkRecords(s, raw, msg, ktls.RecordApplicationData, "write")
}

// checkRecords decrypts raw and compares it with want, all of type typ.
func checkRecords(s ktls.Suite, raw, want []byte, typ byte, op string) error {
	o, err := ktls.NewOpener(probeKeys(s), probeSeq)
	if err != nil {
		return err
	}
	var got []byte
	for len(raw) > 0 {
		rec, err := o.Open(raw)
		if err == nil && rec == nil {
			err = fmt.Errorf("%d bytes of a truncated record", len(raw))
		}
		if err != nil {
			return &NotSupportedError{Feature: "kernel TLS " + s.Name, Tried: op + " through kernel TLS",
				Reason: "what the kernel sent does not decrypt: " + err.Error(),
				Remedy: "this kernel's TLS is broken; report it to the distribution", Degrade: "ktls"}
		}
		if rec.Type != typ || len(rec.Data) > ktls.MaxPlaintext {
			return &NotSupportedError{Feature: "kernel TLS " + s.Name, Tried: op + " through kernel TLS",
				Reason:  fmt.Sprintf("record of type %d and %d bytes, want type %d", rec.Type, len(rec.Data), typ),
				Degrade: "ktls"}
		}
		got = append(got, rec.Data...)
		raw = raw[rec.Wire:]
	}
	if !bytes.Equal(got, want) {
		return &NotSupportedError{Feature: "kernel TLS " + s.Name, Tried: op + " through kernel TLS",
			Reason: fmt.Sprintf("decrypted %d bytes that differ from the %d sent", len(got), len(want)),
			Remedy: "this kernel's TLS is broken; report it to the distribution", Degrade: "ktls"}
	}
	return nil
}

// KTLSSendfile probes sendfile(2) into a kernel TLS socket: a file of
// several records' worth is sent and must decrypt to the same bytes.
func (p *Prober) KTLSSendfile() error {
	k := p.kern()
	s := ktls.AES128GCM
	data := make([]byte, 3*ktls.MaxPlaintext+1234) // several full records and a short one
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(data)
	f, err := k.memfd(data)
	if err != nil {
		return fmt.Errorf("preflight: memfd: %w", err)
	}
	defer k.closeFd(f)
	a, b, err := p.kTLSPair(s)
	if err != nil {
		return err
	}
	defer k.closeFd(b)
	done := make(chan error, 1)
	go func() {
		err := k.sendfile(a, f, len(data))
		if err == nil {
			err = k.shutdownWrite(a)
		}
		k.closeFd(a)
		done <- err
	}()
	raw, rerr := k.readAll(b)
	if err := <-done; err != nil {
		return &NotSupportedError{Feature: "sendfile into kernel TLS", Tried: "sendfile(2) to a kTLS socket", Err: err,
			Reason: "the kernel refused", Degrade: "ktls"}
	}
	if rerr != nil {
		return fmt.Errorf("preflight: read the records: %w", rerr)
	}
	return checkRecords(s, raw, data, ktls.RecordApplicationData, "sendfile")
}

// KTLSRecordType probes sending a record of another content type (an
// alert) with a TLS_SET_RECORD_TYPE control message (Linux 4.13).
func (p *Prober) KTLSRecordType() error {
	k := p.kern()
	s := ktls.AES128GCM
	a, b, err := p.kTLSPair(s)
	if err != nil {
		return err
	}
	defer k.closeFd(b)
	alert := []byte{1, 0} // warning, close_notify
	err = k.sendRecord(a, ktls.RecordAlert, alert)
	if err == nil {
		err = k.shutdownWrite(a)
	}
	k.closeFd(a)
	if err != nil {
		return &NotSupportedError{Feature: "kernel TLS record types", Tried: "sendmsg with TLS_SET_RECORD_TYPE", Err: err,
			Reason: "alerts cannot be sent once the kernel owns the socket", Degrade: "ktls"}
	}
	raw, err := k.readAll(b)
	if err != nil {
		return fmt.Errorf("preflight: read the records: %w", err)
	}
	return checkRecords(s, raw, alert, ktls.RecordAlert, "an alert")
}

// KTLSRekey probes installing a second TX key on a kernel TLS socket, what
// answering a client's KeyUpdate needs (Linux 6.14, the "tls: implement
// rekey for TLS1.3" series).
// Without it the engine closes such connections cleanly: a warning only.
func (p *Prober) KTLSRekey() error {
	k := p.kern()
	s := ktls.AES128GCM
	a, b, err := p.kTLSPair(s)
	if err != nil {
		return err
	}
	defer k.closeFd(a)
	defer k.closeFd(b)
	next := probeKeys(s)
	next.Key[0] ^= 0xff
	if err := k.setTX(a, next, 0); err != nil {
		if errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.EINVAL) {
			return &NotSupportedError{Feature: "kernel TLS rekey", Tried: "a second setsockopt(TLS_TX)", Err: err,
				Reason: "a client's KeyUpdate request will close its connection cleanly",
				Remedy: "Linux 6.14 or newer rekeys in the kernel"}
		}
		return fmt.Errorf("preflight: second TLS_TX: %w", err)
	}
	return nil
}

// Congestion probes that TCP congestion control name is available and
// that this process may set it on a socket.
func (p *Prober) Congestion(name string) error {
	k := p.kern()
	avail, _ := k.readFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	a, b, err := k.tcpPair()
	if err != nil {
		return fmt.Errorf("preflight: loopback TCP pair: %w", err)
	}
	defer k.closeFd(a)
	defer k.closeFd(b)
	ns := &NotSupportedError{Feature: strings.ToUpper(name), Tried: fmt.Sprintf("setsockopt(TCP_CONGESTION, %q)", name), Degrade: "bbr"}
	if err := k.setCongestion(a, name); err != nil {
		ns.Err = err
		switch {
		case errors.Is(err, syscall.ENOENT):
			ns.Reason = "not available in this kernel (tcp_available_congestion_control: " + strings.TrimSpace(string(avail)) + ")"
			ns.Remedy = "modprobe tcp_" + name + ", and add tcp_" + name + " to /etc/modules-load.d/engine.conf"
		case errors.Is(err, syscall.EPERM):
			ns.Reason = "available but not allowed for this process"
			ns.Remedy = fmt.Sprintf("add %s to net.ipv4.tcp_allowed_congestion_control (sysctl -w net.ipv4.tcp_allowed_congestion_control=\"reno cubic %s\") or give the process CAP_NET_ADMIN", name, name)
		default:
			return fmt.Errorf("preflight: setsockopt(TCP_CONGESTION, %q): %w", name, err)
		}
		return ns
	}
	got, err := k.congestion(a)
	if err != nil {
		return fmt.Errorf("preflight: getsockopt(TCP_CONGESTION): %w", err)
	}
	if got != name {
		ns.Reason = "the socket reports " + strconv.Quote(got) + " after setting it"
		ns.Remedy = "check the kernel's congestion control modules"
		return ns
	}
	return nil
}

// UDPGSO probes UDP generic segmentation offload (UDP_SEGMENT, Linux 4.18,
// commit bec1f6f69736), which quic-go uses to send batches of packets.
func (p *Prober) UDPGSO() error {
	k := p.kern()
	fd, err := k.udpSocket()
	if err != nil {
		return fmt.Errorf("preflight: UDP socket: %w", err)
	}
	defer k.closeFd(fd)
	if err := k.setUDPSegment(fd, 1200); err != nil {
		if errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) {
			return &NotSupportedError{Feature: "UDP GSO", Tried: "setsockopt(UDP_SEGMENT)", Err: err,
				Reason: "HTTP/3 sends one packet per system call, using more CPU", Remedy: "run a Linux 4.18 or newer kernel"}
		}
		return fmt.Errorf("preflight: setsockopt(UDP_SEGMENT): %w", err)
	}
	return nil
}

// QUICBuffer is the UDP socket buffer size quic-go asks for.
const QUICBuffer = 7 << 20

// SocketBuffers probes that UDP sockets can get min-byte buffers: the
// sysctl limits allow it, or this process may force it (CAP_NET_ADMIN).
func (p *Prober) SocketBuffers(min int) error {
	k := p.kern()
	limit := func(name string) int {
		b, err := k.readFile("/proc/sys/net/core/" + name)
		if err != nil {
			return -1
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	rmax, wmax := limit("rmem_max"), limit("wmem_max")
	if rmax >= min && wmax >= min {
		return nil
	}
	fd, err := k.udpSocket()
	if err != nil {
		return fmt.Errorf("preflight: UDP socket: %w", err)
	}
	defer k.closeFd(fd)
	rcv, snd, err := k.forceBuffers(fd, min)
	// The kernel doubles what it is given and reports the doubled size.
	if err == nil && rcv >= min && snd >= min {
		return nil
	}
	ns := &NotSupportedError{Feature: "UDP socket buffers", Tried: fmt.Sprintf("SO_RCVBUFFORCE/SO_SNDBUFFORCE of %d bytes", min), Err: err,
		Reason: fmt.Sprintf("net.core.rmem_max is %d and wmem_max %d, below %d, and this process may not force more; HTTP/3 throughput suffers", rmax, wmax, min),
		Remedy: fmt.Sprintf("sysctl -w net.core.rmem_max=%d net.core.wmem_max=%d (and in /etc/sysctl.d/)", min, min)}
	return ns
}

// ReuseportEBPF probes loading and attaching the sk_reuseport program that
// steers connections by CPU.
func (p *Prober) ReuseportEBPF() error {
	err := p.kern().steering()
	if err == nil {
		return nil
	}
	ns := &NotSupportedError{Feature: "eBPF connection steering", Tried: "load and attach an SK_REUSEPORT program", Err: err,
		Reason: "connections are spread by the kernel's hash instead of by receiving CPU"}
	ns.Remedy = reuseport.Remedy(err)
	return ns
}

// FileLimit probes that the open-files limit covers need descriptors.
func (p *Prober) FileLimit(need int) error {
	soft, hard, err := p.kern().nofile()
	if err != nil {
		return fmt.Errorf("preflight: getrlimit(RLIMIT_NOFILE): %w", err)
	}
	// Go raises the soft limit to the hard one at start, so the hard
	// limit is what this process gets.
	lim := max(soft, hard)
	if lim >= uint64(need) {
		return nil
	}
	return &NotSupportedError{Feature: "open files", Tried: "getrlimit(RLIMIT_NOFILE)",
		Reason: fmt.Sprintf("the limit is %d, below the %d descriptors that max_connections and the open-file cache may use", lim, need),
		Remedy: fmt.Sprintf("raise it: LimitNOFILE=%d in the systemd unit, or ulimit -n %d; or lower limits.max_connections", need, need)}
}

// Run probes what n asks for and reports.
func (p *Prober) Run(n Needs) *Report {
	k := p.kern()
	r := &Report{Kernel: k.release()}
	add := func(c Check) { r.Checks = append(r.Checks, c) }
	if n.KTLS != Off && n.KTLS != "" {
		ulp := p.TLSULP()
		add(judge("ktls.ulp", "kernel TLS (tls ULP)", n.KTLS, ulp, `setsockopt(TCP_ULP, "tls") attached`))
		type probe struct {
			id, title string
			mode      Mode
			run       func() error
			ok        string
		}
		probes := []probe{}
		for _, s := range ktls.Suites() {
			probes = append(probes, probe{"ktls.tx." + strings.ToLower(strings.NewReplacer("TLS_", "", "_SHA256", "", "_SHA384", "", "_", "").Replace(s.Name)),
				"kTLS TX TLS 1.3 " + s.Name, n.KTLS, func() error { return p.KTLS(s) }, "a record written by the kernel decrypted"})
		}
		probes = append(probes,
			probe{"ktls.sendfile", "sendfile into kTLS", n.KTLS, p.KTLSSendfile, "a file sent by sendfile decrypted record by record"},
			probe{"ktls.record_type", "kTLS alerts (TLS_SET_RECORD_TYPE)", n.KTLS, p.KTLSRecordType, "an alert record decrypted"},
			probe{"ktls.rekey", "kTLS rekey (KeyUpdate)", Auto, p.KTLSRekey, "a second TX key was accepted"},
		)
		for _, pr := range probes {
			if ulp != nil {
				c := judge(pr.id, pr.title, pr.mode, ulp, "")
				c.Reason = "not tried: the tls ULP is unavailable"
				c.Remedy = ""
				add(c)
				continue
			}
			add(judge(pr.id, pr.title, pr.mode, pr.run(), pr.ok))
		}
	}
	if n.Congestion != "" && n.CongestionMode != Off {
		add(judge("tcp.congestion", "TCP congestion control "+n.Congestion, n.CongestionMode, p.Congestion(n.Congestion),
			"listed, and settable on a socket by this process"))
	}
	if n.QUIC {
		add(judge("udp.gso", "UDP GSO (UDP_SEGMENT)", Auto, p.UDPGSO(), "UDP_SEGMENT accepted"))
		add(judge("udp.buffers", "UDP socket buffers for QUIC", Auto, p.SocketBuffers(QUICBuffer), "7 MiB buffers allowed"))
	}
	if n.Steering {
		add(judge("reuseport.ebpf", "eBPF sk_reuseport steering", Auto, p.ReuseportEBPF(), "program loaded and attached"))
	}
	if n.OpenFiles > 0 {
		add(judge("nofile", "open files limit", Auto, p.FileLimit(n.OpenFiles), "enough for max_connections and the file cache"))
	}
	r.OK = len(r.Failed()) == 0
	return r
}
