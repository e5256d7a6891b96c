package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// syscallObjects are the counting program, its link to sys_enter and the
// map of counters: key a tgid (u32), value its syscalls (u64).
type syscallObjects struct {
	counts *ebpf.Map
	prog   *ebpf.Program
	link   link.Link
}

// maxCounted is the processes the map holds. It is an LRU hash: when it
// is full, inserting a new process's counter drops the one least recently
// used. A server under load is used on every syscall, so only a server
// idle while more processes than this started would lose its counter
// (and a count that went down reads as unknown).
const maxCounted = 1 << 16

// bpfNoExist is BPF_NOEXIST: map_update_elem inserts only a key that is
// absent.
const bpfNoExist = 1

func openSyscalls() (*syscallCounter, error) {
	// bpf_get_current_pid_tgid gives the tgid in the initial PID
	// namespace; /proc lists the pids of the harness's own.
	if b, err := os.ReadFile("/proc/self/status"); err == nil && nestedPIDNamespace(string(b)) {
		return nil, errors.New("this harness runs in a PID namespace of its own: the kernel's tgids are not the pids it sees in /proc")
	}
	c := &syscallCounter{}
	o := &c.objs
	var err error
	o.counts, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "compare_sysc", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: maxCounted,
	})
	if err != nil {
		return nil, fmt.Errorf("create the counters' map: %w", needsRoot(err))
	}
	m := o.counts.FD()
	insns := asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),                     // tgid, the process
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word), // key
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord), // a new process's first count
		asm.LoadMapPtr(asm.R1, m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "add"),
		// The process's first syscall since the counter was opened.
		asm.LoadMapPtr(asm.R1, m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, bpfNoExist),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		// Another of its threads inserted the key first, on another CPU:
		// add to that one.
		asm.LoadMapPtr(asm.R1, m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1).WithSymbol("add"),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord), // atomic: threads on other CPUs add too
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
	o.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "compare_sysc", Type: ebpf.RawTracepoint, License: "GPL", Instructions: insns,
	})
	if err != nil {
		o.close()
		return nil, fmt.Errorf("load the raw tracepoint program: %w", needsRoot(err))
	}
	// A raw tracepoint is attached by name, without tracefs.
	o.link, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: o.prog})
	if err != nil {
		o.close()
		return nil, fmt.Errorf("attach to the raw tracepoint sys_enter: %w", needsRoot(err))
	}
	return c, nil
}

func (o *syscallObjects) count(pids []int) (uint64, error) {
	var sum uint64
	for _, pid := range pids {
		var n uint64
		err := o.counts.Lookup(uint32(pid), &n)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read the syscalls of process %d: %w", pid, err)
		}
		sum += n
	}
	return sum, nil
}

func (o *syscallObjects) close() error {
	var errs []error
	if o.link != nil {
		errs = append(errs, o.link.Close())
	}
	return errors.Join(append(errs, o.prog.Close(), o.counts.Close())...)
}

// needsRoot says what a refusal means: the library's error for EPERM
// speaks of RLIMIT_MEMLOCK, which kernels since 5.11 no longer use for
// BPF memory; what the harness lacks is a capability.
func needsRoot(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("not permitted: counting syscalls needs root (CAP_BPF and CAP_PERFMON): %w", err)
	}
	return err
}

// nestedPIDNamespace reads a process's /proc status: NSpid lists its pid
// in each PID namespace it is in, the initial one first, so more than one
// means it is not in the initial one.
func nestedPIDNamespace(status string) bool {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return len(strings.Fields(v)) > 1
		}
	}
	return false
}
