package reactor

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// steering holds the eBPF objects that spread connections by CPU. They
// must stay open as long as the listeners: closing the program detaches
// nothing (the socket group holds a reference), but closing the maps
// early would.
type steering struct {
	socks, cpus *ebpf.Map
	prog        *ebpf.Program
}

func (s *steering) close() {
	for _, c := range []interface{ Close() error }{s.prog, s.socks, s.cpus} {
		if c != nil {
			c.Close()
		}
	}
}

// steer attaches an SK_REUSEPORT program to the group of listeners fds
// (one per loop) that sends each new connection to the loop serving the
// CPU whose softirq received it: cpuLoop[cpu] is that loop. Programs of
// this type and bpf_sk_select_reuseport arrived in Linux 4.19 (commit
// 2dbb9b9e6df6). On any error the kernel's hash keeps spreading
// connections.
func steer(fds []int, cpuLoop map[int]int) (*steering, error) {
	maxCPU := 0
	for cpu := range cpuLoop {
		maxCPU = max(maxCPU, cpu)
	}
	s := &steering{}
	var err error
	s.socks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_socks", Type: ebpf.ReusePortSockArray,
		KeySize: 4, ValueSize: 8, MaxEntries: uint32(len(fds)),
	})
	if err != nil {
		return nil, fmt.Errorf("create sockarray map: %w", err)
	}
	s.cpus, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_cpus", Type: ebpf.Array,
		KeySize: 4, ValueSize: 4, MaxEntries: uint32(maxCPU + 1),
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("create cpu map: %w", err)
	}
	for i, fd := range fds {
		if err := s.socks.Put(uint32(i), uint64(fd)); err != nil {
			s.close()
			return nil, fmt.Errorf("add listener %d to sockarray: %w", i, err)
		}
	}
	for cpu, loop := range cpuLoop {
		if err := s.cpus.Put(uint32(cpu), uint32(loop)); err != nil {
			s.close()
			return nil, fmt.Errorf("fill cpu map: %w", err)
		}
	}

	const skPass = 1
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // r6 = ctx
		asm.FnGetSmpProcessorId.Call(),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word), // key = cpu
		asm.LoadMapPtr(asm.R1, s.cpus.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"), // CPU not in the map: kernel hash
		asm.LoadMem(asm.R0, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.Word), // key = loop
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, s.socks.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(), // on failure no socket is chosen: kernel hash
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	}
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "engine_steer", Type: ebpf.SkReuseport, License: "GPL", Instructions: insns,
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("load sk_reuseport program: %w", err)
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, s.prog.FD()); err != nil {
		s.close()
		return nil, fmt.Errorf("attach program: %w", err)
	}
	return s, nil
}

// ProbeSteering loads and attaches the steering program to a throwaway
// listener on 127.0.0.1, for preflight. nil means serve will steer.
func ProbeSteering() error {
	fd, _, err := listenReusePort("127.0.0.1:0", false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	s, err := steer([]int{fd}, map[int]int{0: 0})
	if err != nil {
		return err
	}
	s.close()
	return nil
}
