package reuseport

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

type quicObjects struct {
	prog               *ebpf.Program
	socks, cur, relays *ebpf.Map
}

func (o *quicObjects) close() error {
	var errs []error
	if o.prog != nil {
		errs = append(errs, o.prog.Close())
	}
	for _, m := range []*ebpf.Map{o.socks, o.cur, o.relays} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// The program reads the first bytes of the QUIC packet (after the 8-byte
// UDP header, where the context's data starts) and picks the socket:
//
//	a client address with a relayed flow (relays), but for an Initial:
//	    the generation relaying it
//	long header, type Initial (0x00) or 0-RTT (0x10): current. A
//	    client's first flight carries an ID of its own, which may look
//	    like one of the engine's (quic-go's clients pick 8 to 20 random
//	    bytes); its later Initials carry the server's ID but only
//	    acknowledge: a handshake under way in a generation that handed
//	    over finishes by its Handshake packets, which go by ID.
//	long header, Handshake or Retry: socks[DCID[0]], byte 6
//	short header: socks[DCID[0]], byte 1
//	no socket for that generation, or a packet too short: current
//	no current socket either: the kernel's hash
//
// The relays map: a client address with a relayed flow, and the
// generation relaying it. The key: the address (IPv4 in the first 4 of
// 16 bytes), the port in network order, the family (4 or 6), padding.
const (
	relayKeyLen = 24
	maxRelays   = 1 << 16
	// struct sk_reuseport_md: data and data_end are 8 bytes each, then
	// len, then eth_protocol (network order, as htons(ETH_P_IP)).
	mdEthProtocol = 20
	ethIPv4       = 0x0008
	ethIPv6       = 0xdd86
)

func relayKey(a netip.AddrPort) []byte {
	k := make([]byte, relayKeyLen)
	ip := a.Addr().Unmap()
	if ip.Is4() {
		b := ip.As4()
		copy(k, b[:])
		k[18] = 4
	} else {
		b := ip.As16()
		copy(k, b[:])
		k[18] = 6
	}
	k[16], k[17] = byte(a.Port()>>8), byte(a.Port())
	return k
}

func (o *quicObjects) holdRelay(client netip.AddrPort, gen uint8) error {
	return o.relays.Put(relayKey(client), uint32(gen))
}

func (o *quicObjects) dropRelay(client netip.AddrPort) { o.relays.Delete(relayKey(client)) }

func steerQUIC(fd int, gen uint8) (*QUICSteering, error) {
	s := &QUICSteering{}
	o := &s.objs
	var err error
	if o.socks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_qsocks", Type: ebpf.ReusePortSockArray, KeySize: 4, ValueSize: 8, MaxEntries: 256,
	}); err != nil {
		return nil, fmt.Errorf("reuseport: create QUIC sockarray map: %w", err)
	}
	if o.cur, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_qcur", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1,
	}); err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: create QUIC current map: %w", err)
	}
	if o.relays, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_qrelays", Type: ebpf.Hash, KeySize: relayKeyLen, ValueSize: 4, MaxEntries: maxRelays,
	}); err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: create QUIC relays map: %w", err)
	}
	const skPass = 1
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // r6 = ctx
		// load 7 bytes at 8 (the QUIC packet's first) to fp-16
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 7),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "current"),
		// An Initial packet never goes by the client's address: a new
		// connection from a port a finished relay used must reach the
		// current generation.
		asm.LoadMem(asm.R7, asm.RFP, -16, asm.Byte),
		asm.And.Imm(asm.R7, 0xb0), // long header and type bits
		asm.JEq.Imm(asm.R7, 0x80, "cid"),
		// A client with a relayed flow: the generation relaying it
		// (key at fp-48: source address, 16 bytes, v4 in the first 4;
		// source port; family).
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, -48, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -40, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
		asm.LoadMem(asm.R7, asm.R6, mdEthProtocol, asm.Word),
		asm.Mov.Imm(asm.R2, 12), // IPv4: the source address at 12, 4 bytes
		asm.Mov.Imm(asm.R4, 4),
		asm.Mov.Imm(asm.R8, 4),
		asm.JEq.Imm(asm.R7, ethIPv4, "addr"),
		asm.JNE.Imm(asm.R7, ethIPv6, "cid"),
		asm.Mov.Imm(asm.R2, 8), // IPv6: at 8, 16 bytes
		asm.Mov.Imm(asm.R4, 16),
		asm.Mov.Imm(asm.R8, 6),
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol("addr"),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -48),
		asm.Mov.Imm(asm.R5, 1), // BPF_HDR_START_NET
		asm.FnSkbLoadBytesRelative.Call(),
		asm.JNE.Imm(asm.R0, 0, "cid"),
		asm.StoreMem(asm.RFP, -30, asm.R8, asm.Byte), // family
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0), // the UDP header's source port
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -32),
		asm.Mov.Imm(asm.R4, 2),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "cid"),
		asm.LoadMapPtr(asm.R1, o.relays.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -48),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "cid"),
		asm.LoadMem(asm.R9, asm.R0, 0, asm.Word),
	}
	insns = append(insns, selectGen(asm.R9, o.socks.FD())...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R7, asm.RFP, -16, asm.Byte).WithSymbol("cid"), // first byte
		asm.Mov.Reg(asm.R8, asm.R7),
		asm.And.Imm(asm.R8, 0x80),
		asm.JEq.Imm(asm.R8, 0, "short"),
		asm.Mov.Reg(asm.R8, asm.R7),
		asm.And.Imm(asm.R8, 0x30),
		asm.JLT.Imm(asm.R8, 0x20, "current"),        // Initial or 0-RTT
		asm.LoadMem(asm.R9, asm.RFP, -10, asm.Byte), // DCID[0] of a long header
		asm.Ja.Label("select"),
		asm.LoadMem(asm.R9, asm.RFP, -15, asm.Byte).WithSymbol("short"), // DCID[0] of a short header
	)
	byID := selectGen(asm.R9, o.socks.FD())
	byID[0] = byID[0].WithSymbol("select")
	insns = append(insns, byID...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "pass"),
		// current: socks[cur[0]]
		asm.Mov.Imm(asm.R1, 0).WithSymbol("current"),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word),
		asm.LoadMapPtr(asm.R1, o.cur.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R9, asm.R0, 0, asm.Word),
	)
	insns = append(insns, selectGen(asm.R9, o.socks.FD())...) // on failure: the kernel's hash
	insns = append(insns,
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	)
	if o.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "engine_qsteer", Type: ebpf.SkReuseport, License: "GPL", Instructions: insns,
	}); err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: load the QUIC sk_reuseport program: %w", err)
	}
	if err := o.add(gen, fd); err != nil {
		o.close()
		return nil, err
	}
	if err := o.setCurrent(gen); err != nil {
		o.close()
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, o.prog.FD()); err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: attach the QUIC program: %w", os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_EBPF", err))
	}
	return s, nil
}

// selectGen is the instructions that pick socks[gen] (gen in a register;
// r6 the context) for the packet; r0 is 0 when one was picked.
func selectGen(gen asm.Register, socks int) asm.Instructions {
	return asm.Instructions{
		asm.StoreMem(asm.RFP, -4, gen, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, socks),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -4),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
	}
}

func (o *quicObjects) add(gen uint8, fd int) error {
	if err := o.socks.Put(uint32(gen), uint64(fd)); err != nil {
		return fmt.Errorf("reuseport: register generation %d's UDP socket: %w", gen, err)
	}
	return nil
}

func (o *quicObjects) setCurrent(gen uint8) error {
	if err := o.cur.Put(uint32(0), uint32(gen)); err != nil {
		return fmt.Errorf("reuseport: make generation %d current: %w", gen, err)
	}
	return nil
}

func (o *quicObjects) current() (uint8, error) {
	var v uint32
	if err := o.cur.Lookup(uint32(0), &v); err != nil {
		return 0, err
	}
	return uint8(v), nil
}

func (o *quicObjects) remove(gen uint8) { o.socks.Delete(uint32(gen)) }

func (o *quicObjects) files() ([]*os.File, error) {
	var out []*os.File
	for _, fd := range []int{o.prog.FD(), o.socks.FD(), o.cur.FD(), o.relays.FD()} {
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
		}
		out = append(out, os.NewFile(uintptr(nfd), "quic-steering"))
	}
	return out, nil
}

func adoptQUIC(fs []*os.File) (*QUICSteering, error) {
	defer func() {
		for _, f := range fs {
			f.Close()
		}
	}()
	if len(fs) != 4 {
		return nil, fmt.Errorf("reuseport: %d QUIC steering descriptors handed over, want 4", len(fs))
	}
	s := &QUICSteering{}
	o := &s.objs
	fds := make([]int, 4)
	for i, f := range fs {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, fd := range fds[:i] {
				unix.Close(fd)
			}
			return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
		}
		fds[i] = fd
	}
	var err error
	if o.prog, err = ebpf.NewProgramFromFD(fds[0]); err != nil {
		for _, fd := range fds[1:] {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("reuseport: adopt the QUIC steering program: %w", err)
	}
	for i, m := range []**ebpf.Map{&o.socks, &o.cur, &o.relays} {
		if *m, err = ebpf.NewMapFromFD(fds[1+i]); err != nil {
			for _, fd := range fds[2+i:] {
				unix.Close(fd)
			}
			o.close()
			return nil, fmt.Errorf("reuseport: adopt the QUIC steering maps: %w", err)
		}
	}
	return s, nil
}
