package main

// A syscallCounter counts the syscalls of every process on the machine,
// by process, from the moment it is opened: an eBPF program on the raw
// tracepoint sys_enter (written with cilium/ebpf's asm package, so no C
// compiler is needed) adds one to the calling process's counter, keyed
// by its tgid, the pid /proc lists. The run opens one, and reads the
// counters of a server's processes before and after each sample. While
// it is open every syscall on the machine, the clients' as well as the
// servers', also runs the program (a map lookup and an atomic add): the
// same for every server. Linux-only; elsewhere opening it fails with an
// error wrapping errors.ErrUnsupported.
type syscallCounter struct {
	objs syscallObjects
}

// openSyscallCounter loads the program and attaches it. It needs CAP_BPF
// and CAP_PERFMON (root) and raw tracepoints (Linux 4.17, commit
// c4f6699dfcb8); on error nothing is attached, and the page says the
// syscalls were not measured and why.
func openSyscallCounter() (*syscallCounter, error) { return openSyscalls() }

// count is the syscalls the processes pids have made since the counter
// was opened, summed; a process that has made none has no counter and
// adds nothing.
func (c *syscallCounter) count(pids []int) (uint64, error) { return c.objs.count(pids) }

// close detaches the program and frees its map; on a nil counter it
// does nothing.
func (c *syscallCounter) close() error {
	if c == nil {
		return nil
	}
	return c.objs.close()
}
