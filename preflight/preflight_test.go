package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mediaship/engine/ktls"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fakeKernel plays a kernel for the probes. With no errors set it behaves
// like a kernel with working kTLS: what is written after setTX comes out
// of the peer as records sealed with the installed key.
type fakeKernel struct {
	ulpErr, txErr, recErr, ccErr, gsoErr, forceErr, steerErr error
	secondTXErr                                              error
	ccGot                                                    string // what getsockopt reports; "" = what was set
	files                                                    map[string]string
	nofileSoft, nofileHard                                   uint64
	wrongSeq                                                 bool // seal with a sequence number off by one

	mu      sync.Mutex
	cond    *sync.Cond // signalled when a socket's peer shuts down
	sockets map[int]*fakeSock
	next    int
}

type fakeSock struct {
	peer   int
	tx     *ktls.Sealer
	hasTX  bool
	inbox  []byte
	cc     string
	closed bool
	eof    bool // the peer shut down its write side
}

// lock serialises the fake: the sendfile probe writes from a goroutine.
func (f *fakeKernel) lock() func() {
	f.mu.Lock()
	if f.cond == nil {
		f.cond = sync.NewCond(&f.mu)
	}
	return f.mu.Unlock
}

func (f *fakeKernel) sock(fd int) *fakeSock {
	if f.sockets == nil {
		f.sockets = map[int]*fakeSock{}
	}
	if f.sockets[fd] == nil {
		f.sockets[fd] = &fakeSock{peer: -1}
	}
	return f.sockets[fd]
}

func (f *fakeKernel) newFd() int { f.next++; return f.next + 100 }

func (f *fakeKernel) release() string { return "6.99.0-fake" }
func (f *fakeKernel) tcpPair() (int, int, error) {
	defer f.lock()()
	a, b := f.newFd(), f.newFd()
	f.sock(a).peer, f.sock(b).peer = b, a
	return a, b, nil
}
func (f *fakeKernel) udpSocket() (int, error) { defer f.lock()(); return f.newFd(), nil }
func (f *fakeKernel) closeFd(fd int) {
	defer f.lock()()
	f.sock(fd).closed = true
	f.shut(fd)
}
func (f *fakeKernel) shut(fd int) {
	if p := f.sock(fd).peer; p >= 0 {
		f.sock(p).eof = true
		f.cond.Broadcast()
	}
}
func (f *fakeKernel) setULP(int) error { return f.ulpErr }
func (f *fakeKernel) setTX(fd int, k ktls.Keys, seq uint64) error {
	defer f.lock()()
	s := f.sock(fd)
	if s.hasTX {
		return f.secondTXErr
	}
	if f.txErr != nil {
		return f.txErr
	}
	if f.wrongSeq {
		seq++
	}
	s.tx, _ = ktls.NewSealer(k, seq)
	s.hasTX = true
	return nil
}
func (f *fakeKernel) emit(fd int, typ byte, b []byte) {
	s := f.sock(fd)
	peer := f.sock(s.peer)
	if s.tx == nil {
		peer.inbox = append(peer.inbox, b...)
		return
	}
	for len(b) > 0 || typ != ktls.RecordApplicationData {
		n := min(len(b), ktls.MaxPlaintext)
		peer.inbox, _ = s.tx.Seal(peer.inbox, typ, b[:n])
		b = b[n:]
		if typ != ktls.RecordApplicationData {
			break
		}
	}
}
func (f *fakeKernel) sendRecord(fd int, typ byte, data []byte) error {
	if f.recErr != nil {
		return f.recErr
	}
	defer f.lock()()
	f.emit(fd, typ, data)
	return nil
}
func (f *fakeKernel) write(fd int, b []byte) error {
	defer f.lock()()
	f.emit(fd, ktls.RecordApplicationData, b)
	return nil
}
func (f *fakeKernel) shutdownWrite(fd int) error { defer f.lock()(); f.shut(fd); return nil }
func (f *fakeKernel) readAll(fd int) ([]byte, error) {
	defer f.lock()()
	s := f.sock(fd)
	for !s.eof {
		f.cond.Wait()
	}
	out := s.inbox
	s.inbox = nil
	return out, nil
}
func (f *fakeKernel) memfd(data []byte) (int, error) {
	defer f.lock()()
	fd := f.newFd()
	f.sock(fd).inbox = bytes.Clone(data)
	return fd, nil
}
func (f *fakeKernel) sendfile(out, in int, n int) error {
	defer f.lock()()
	f.emit(out, ktls.RecordApplicationData, f.sock(in).inbox[:n])
	return nil
}
func (f *fakeKernel) setCongestion(fd int, name string) error {
	if f.ccErr != nil {
		return f.ccErr
	}
	defer f.lock()()
	f.sock(fd).cc = name
	return nil
}
func (f *fakeKernel) congestion(fd int) (string, error) {
	if f.ccGot != "" {
		return f.ccGot, nil
	}
	defer f.lock()()
	return f.sock(fd).cc, nil
}
func (f *fakeKernel) setUDPSegment(int, int) error { return f.gsoErr }
func (f *fakeKernel) forceBuffers(fd int, size int) (int, int, error) {
	if f.forceErr != nil {
		return 0, 0, f.forceErr
	}
	return 2 * size, 2 * size, nil
}
func (f *fakeKernel) readFile(p string) ([]byte, error) {
	if v, ok := f.files[p]; ok {
		return []byte(v), nil
	}
	return nil, os.ErrNotExist
}
func (f *fakeKernel) exists(p string) bool { _, ok := f.files[p]; return ok }
func (f *fakeKernel) nofile() (uint64, uint64, error) {
	if f.nofileHard == 0 {
		return 1024, 1 << 20, nil
	}
	return f.nofileSoft, f.nofileHard, nil
}
func (f *fakeKernel) steering() error { return f.steerErr }

func notSupported(t *testing.T, what string, err error, wantIn ...string) {
	t.Helper()
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("%s: %v, want ErrNotSupported", what, err)
		return
	}
	var ns *NotSupportedError
	errors.As(err, &ns)
	all := ns.Error() + " | " + ns.Remedy
	for _, w := range wantIn {
		if !strings.Contains(all, w) {
			t.Errorf("%s: %q lacks %q", what, all, w)
		}
	}
}

func couldNotTell(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, ErrNotSupported) {
		t.Errorf("%s: %v, want an inconclusive error", what, err)
	}
}

func TestULPErrnos(t *testing.T) {
	modPath := "/lib/modules/6.99.0-fake/kernel/net/tls/tls.ko"
	p := &Prober{k: &fakeKernel{ulpErr: syscall.ENOENT, files: map[string]string{modPath: ""}}}
	notSupported(t, "ENOENT with module", p.TLSULP(), "ENOENT", "not loaded", "modprobe tls", "modules-load.d")
	p = &Prober{k: &fakeKernel{ulpErr: syscall.ENOENT}}
	notSupported(t, "ENOENT without module", p.TLSULP(), "CONFIG_TLS")
	p = &Prober{k: &fakeKernel{ulpErr: syscall.ENOENT, files: map[string]string{"/lib/modules/6.99.0-fake/kernel/net/tls/tls.ko.zst": ""}}}
	notSupported(t, "ENOENT with compressed module", p.TLSULP(), "modprobe tls")
	p = &Prober{k: &fakeKernel{ulpErr: syscall.ENOPROTOOPT}}
	notSupported(t, "ENOPROTOOPT", p.TLSULP(), "ENOPROTOOPT", "4.13")
	for _, e := range []error{syscall.EPERM, syscall.EINVAL, syscall.EEXIST} {
		couldNotTell(t, "ULP "+e.Error(), (&Prober{k: &fakeKernel{ulpErr: e}}).TLSULP())
	}
	if err := (&Prober{k: &fakeKernel{}}).TLSULP(); err != nil {
		t.Errorf("working ULP: %v", err)
	}
}

func TestTXErrnos(t *testing.T) {
	for _, s := range ktls.Suites() {
		notSupported(t, "EINVAL "+s.Name, (&Prober{k: &fakeKernel{txErr: syscall.EINVAL}}).KTLS(s), "does not offer this cipher", s.Name)
		notSupported(t, "ENOENT "+s.Name, (&Prober{k: &fakeKernel{txErr: syscall.ENOENT}}).KTLS(s), "modprobe")
		notSupported(t, "ENOPROTOOPT "+s.Name, (&Prober{k: &fakeKernel{txErr: syscall.ENOPROTOOPT}}).KTLS(s), "SOL_TLS")
		couldNotTell(t, "EBUSY "+s.Name, (&Prober{k: &fakeKernel{txErr: syscall.EBUSY}}).KTLS(s))
		if err := (&Prober{k: &fakeKernel{}}).KTLS(s); err != nil {
			t.Errorf("working kTLS %s: %v", s.Name, err)
		}
	}
	notSupported(t, "chacha ENOENT", (&Prober{k: &fakeKernel{txErr: syscall.ENOENT}}).KTLS(ktls.ChaCha20Poly1305), "modprobe chacha20poly1305")
	// A kernel whose records do not decrypt (here: the wrong sequence
	// number) is broken, conclusively.
	notSupported(t, "wrong sequence", (&Prober{k: &fakeKernel{wrongSeq: true}}).KTLS(ktls.AES128GCM), "does not decrypt")
	notSupported(t, "wrong sequence sendfile", (&Prober{k: &fakeKernel{wrongSeq: true}}).KTLSSendfile(), "does not decrypt")
	// An unavailable ULP is reported as such by the TX probes too.
	notSupported(t, "TX without ULP", (&Prober{k: &fakeKernel{ulpErr: syscall.ENOENT}}).KTLS(ktls.AES128GCM), "TCP_ULP")
}

func TestOtherKTLSProbes(t *testing.T) {
	ok := &Prober{k: &fakeKernel{}}
	for name, err := range map[string]error{"sendfile": ok.KTLSSendfile(), "record type": ok.KTLSRecordType()} {
		if err != nil {
			t.Errorf("%s on a working kernel: %v", name, err)
		}
	}
	notSupported(t, "record type EINVAL", (&Prober{k: &fakeKernel{recErr: syscall.EINVAL}}).KTLSRecordType(), "TLS_SET_RECORD_TYPE")
	notSupported(t, "rekey EBUSY", (&Prober{k: &fakeKernel{secondTXErr: syscall.EBUSY}}).KTLSRekey(), "6.14", "EBUSY")
	couldNotTell(t, "rekey EIO", (&Prober{k: &fakeKernel{secondTXErr: syscall.EIO}}).KTLSRekey())
	if err := (&Prober{k: &fakeKernel{}}).KTLSRekey(); err != nil {
		t.Errorf("rekey on a kernel that allows it: %v", err)
	}
}

func TestCongestionErrnos(t *testing.T) {
	avail := map[string]string{"/proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic\n"}
	notSupported(t, "ENOENT", (&Prober{k: &fakeKernel{ccErr: syscall.ENOENT, files: avail}}).Congestion("bbr"),
		"ENOENT", "reno cubic", "modprobe tcp_bbr")
	notSupported(t, "EPERM", (&Prober{k: &fakeKernel{ccErr: syscall.EPERM}}).Congestion("bbr"),
		"not allowed", "tcp_allowed_congestion_control", "CAP_NET_ADMIN")
	notSupported(t, "reads back other", (&Prober{k: &fakeKernel{ccGot: "cubic"}}).Congestion("bbr"), `"cubic"`)
	couldNotTell(t, "EINVAL", (&Prober{k: &fakeKernel{ccErr: syscall.EINVAL}}).Congestion("bbr"))
	if err := (&Prober{k: &fakeKernel{}}).Congestion("bbr"); err != nil {
		t.Errorf("working BBR: %v", err)
	}
}

func TestWarnOnlyProbes(t *testing.T) {
	for _, e := range []error{syscall.ENOPROTOOPT, syscall.EINVAL} {
		notSupported(t, "GSO "+e.Error(), (&Prober{k: &fakeKernel{gsoErr: e}}).UDPGSO(), "4.18")
	}
	couldNotTell(t, "GSO EPERM", (&Prober{k: &fakeKernel{gsoErr: syscall.EPERM}}).UDPGSO())

	low := map[string]string{"/proc/sys/net/core/rmem_max": "212992\n", "/proc/sys/net/core/wmem_max": "212992\n"}
	high := map[string]string{"/proc/sys/net/core/rmem_max": "8000000\n", "/proc/sys/net/core/wmem_max": "8000000\n"}
	if err := (&Prober{k: &fakeKernel{files: high}}).SocketBuffers(QUICBuffer); err != nil {
		t.Errorf("high sysctls: %v", err)
	}
	if err := (&Prober{k: &fakeKernel{files: low}}).SocketBuffers(QUICBuffer); err != nil {
		t.Errorf("low sysctls but may force: %v", err)
	}
	notSupported(t, "buffers EPERM", (&Prober{k: &fakeKernel{files: low, forceErr: syscall.EPERM}}).SocketBuffers(QUICBuffer),
		"212992", "sysctl -w net.core.rmem_max=7340032")

	notSupported(t, "steering EPERM", (&Prober{k: &fakeKernel{steerErr: syscall.EPERM}}).ReuseportEBPF(), "CAP_BPF")
	notSupported(t, "steering EINVAL", (&Prober{k: &fakeKernel{steerErr: syscall.EINVAL}}).ReuseportEBPF(), "4.19")

	notSupported(t, "nofile", (&Prober{k: &fakeKernel{nofileSoft: 1024, nofileHard: 4096}}).FileLimit(10000), "4096", "LimitNOFILE=10000")
	if err := (&Prober{k: &fakeKernel{nofileSoft: 1024, nofileHard: 65536}}).FileLimit(10000); err != nil {
		t.Errorf("hard limit suffices: %v", err)
	}
}

// TestRunStatuses: a missing feature fails when required, warns when
// auto, and is not probed when off; lines after a missing ULP say they
// were not tried.
func TestRunStatuses(t *testing.T) {
	k := &fakeKernel{ulpErr: syscall.ENOENT, ccErr: syscall.EPERM}
	r := (&Prober{k: k}).Run(Needs{KTLS: Require, Congestion: "bbr", CongestionMode: Auto})
	if r.OK {
		t.Error("report OK with kTLS required and missing")
	}
	byID := map[string]Check{}
	for _, c := range r.Checks {
		byID[c.ID] = c
	}
	want := map[string]Status{"ktls.ulp": Fail, "ktls.tx.aes128gcm": Fail, "ktls.tx.aes256gcm": Fail,
		"ktls.tx.chacha20poly1305": Fail, "ktls.sendfile": Fail, "ktls.record_type": Fail, "ktls.rekey": Warn, "tcp.congestion": Warn}
	for id, st := range want {
		if byID[id].Status != st {
			t.Errorf("%s = %s, want %s", id, byID[id].Status, st)
		}
	}
	if len(r.Checks) != len(want) {
		t.Errorf("%d checks, want %d", len(r.Checks), len(want))
	}
	if !strings.Contains(byID["ktls.ulp"].Remedy, `ktls = "auto"`) {
		t.Errorf("a required feature's remedy should name the key to run without it: %q", byID["ktls.ulp"].Remedy)
	}
	if strings.Contains(byID["tcp.congestion"].Remedy, `= "auto"`) {
		t.Errorf("an auto feature's remedy should not suggest auto: %q", byID["tcp.congestion"].Remedy)
	}
	if byID["ktls.sendfile"].Reason != "not tried: the tls ULP is unavailable" {
		t.Errorf("sendfile line: %q", byID["ktls.sendfile"].Reason)
	}

	r = (&Prober{k: k}).Run(Needs{KTLS: Auto, Congestion: "bbr", CongestionMode: Off})
	if !r.OK || len(r.Checks) != 7 {
		t.Errorf("auto kTLS, congestion off: OK=%v, %d checks", r.OK, len(r.Checks))
	}
	r = (&Prober{k: &fakeKernel{}}).Run(Needs{KTLS: Require, Congestion: "bbr", CongestionMode: Require, QUIC: true, Steering: true, OpenFiles: 100})
	if !r.OK || len(r.Failed())+len(r.Warnings()) != 0 {
		t.Errorf("working kernel: %+v", r.Checks)
	}
	// Could not tell is a failure when required.
	r = (&Prober{k: &fakeKernel{ccErr: syscall.EINVAL}}).Run(Needs{Congestion: "bbr", CongestionMode: Require})
	if r.OK || !strings.HasPrefix(r.Checks[0].Reason, "could not tell") {
		t.Errorf("inconclusive required probe: %+v", r.Checks)
	}
	// The error carries the package name; the report line does not repeat it.
	if err := (&Prober{k: &fakeKernel{ccErr: syscall.EINVAL}}).Congestion("bbr"); err == nil || !strings.HasPrefix(err.Error(), "preflight: ") {
		t.Errorf("Congestion(bbr) = %v, want an error starting with \"preflight: \"", err)
	}
	if want := "could not tell: setsockopt(TCP_CONGESTION, \"bbr\"): "; !strings.HasPrefix(r.Checks[0].Reason, want) {
		t.Errorf("reason %q, want it to start with %q", r.Checks[0].Reason, want)
	}
}

// TestReportFormats pins the JSON schema (golden file; -update rewrites
// it) and checks the text table carries reasons and remedies.
func TestReportFormats(t *testing.T) {
	k := &fakeKernel{ulpErr: syscall.ENOENT, gsoErr: syscall.ENOPROTOOPT, nofileSoft: 1024, nofileHard: 1024}
	r := (&Prober{k: k}).Run(Needs{KTLS: Require, Congestion: "bbr", CongestionMode: Require, QUIC: true, Steering: true, OpenFiles: 4096})
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.json")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, js.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./preflight -run TestReportFormats -update)", err)
	}
	if !bytes.Equal(js.Bytes(), want) {
		t.Errorf("JSON report differs from %s:\n%s", golden, js.Bytes())
	}
	var decoded struct {
		Kernel string `json:"kernel"`
		OK     *bool  `json:"ok"`
		Checks []struct {
			ID, Title, Status, Reason, Remedy string
			Required                          *bool
		} `json:"checks"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil || decoded.OK == nil || len(decoded.Checks) == 0 {
		t.Fatalf("schema: %v %+v", err, decoded)
	}
	for _, c := range decoded.Checks {
		if c.ID == "" || c.Title == "" || c.Reason == "" || c.Required == nil ||
			(c.Status != "ok" && c.Status != "warn" && c.Status != "fail") {
			t.Errorf("check %+v misses a field", c)
		}
	}

	var txt bytes.Buffer
	r.WriteText(&txt)
	for _, w := range []string{"kernel 6.99.0-fake", "kernel TLS (tls ULP)", "FAIL", "fix: run a kernel with CONFIG_TLS",
		"UDP GSO (UDP_SEGMENT)", "WARN", "open files limit", "required feature(s) missing"} {
		if !strings.Contains(txt.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, txt.String())
		}
	}
}
