// Command fetchcompare measures engine fetch against aria2c and curl,
// side by side in one run, on the same file from the same engine server,
// and writes a page: MiB/s and client CPU per GiB, the server's CPU per
// GiB, and, apart, what the digest pass of the server costs with and
// without the outboard tree.
//
//	go run ./bench/fetchcompare [--size 1GiB] [--connections 8] [--repeats 5] [--out docs/BENCHMARKS-fetch.md]
//
// engine fetch checks every 256 KiB group as it lands; aria2c and curl
// check nothing, so each of their downloads is hashed afterwards (BLAKE3,
// timed apart, not in their MiB/s): a download that does not match fails
// the run. Clients take turns in an order that rotates each repeat.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
)

type sample struct {
	mibps, cpuPerGiB, serverPerGiB float64
	durable                        float64       // MiB/s until the file is on disk (engine fetch flushes before it exits; the others are flushed after, timed)
	machinePerGiB                  float64       // the whole machine's CPU (every process and kernel thread) until the file is on disk
	check                          time.Duration // the hash of the result afterwards (aria2c, curl)
}

func main() {
	size := flag.Int64("size", 1<<30, "file size in bytes")
	conns := flag.Int("connections", 8, "connections for engine fetch and aria2c (-x and -s)")
	repeats := flag.Int("repeats", 5, "interleaved repeats")
	out := flag.String("out", "docs/BENCHMARKS-fetch.md", "page to write")
	only := flag.String("clients", "", "measure only these clients (comma-separated: engine,aria2c,curl), for looking into one")
	flag.Parse()
	log.SetFlags(log.Ltime)
	for _, tool := range []string{"aria2c", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Fatalf("%s not installed: install Debian's package (apt-get install -y %s) and run this again", tool, map[string]string{"aria2c": "aria2", "curl": "curl"}[tool])
		}
	}
	work, err := os.MkdirTemp("", "fetchcompare-*")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	repo, _ := os.Getwd()
	build, err := bench.BuildEngine(repo, filepath.Join(work, "engine"))
	if err != nil {
		log.Fatal(err)
	}
	www := filepath.Join(work, "www")
	os.MkdirAll(www, 0o755)
	want := writeRandom(filepath.Join(www, "model.bin"), *size)
	treeRatio := digestPass(filepath.Join(www, "model.bin"))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := exec.Command(build.Path, "serve", "--root", www, "--listen", addr)
	srv.Env = append(os.Environ(), "STATE_DIRECTORY="+filepath.Join(work, "state"))
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	// log.Fatal skips deferred calls: the server and the work folder go
	// through die on every failure from here on.
	die := func(format string, args ...any) {
		srv.Process.Kill()
		srv.Wait()
		os.RemoveAll(work)
		log.Fatalf(format, args...)
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
	}()
	url := "http://" + addr + "/model.bin"
	if err := waitHashed(url); err != nil {
		die("%v", err)
	}

	dls := filepath.Join(work, "dl")
	var dl string
	dropped := true
	clients := []struct {
		name string
		cmd  func() *exec.Cmd
		self bool // checks what it fetched itself
	}{
		{"engine fetch", func() *exec.Cmd {
			return exec.Command(build.Path, "fetch", url, "-o", filepath.Join(dl, "model.bin"), "--connections", strconv.Itoa(*conns), "--json")
		}, true},
		{"aria2c", func() *exec.Cmd {
			n := strconv.Itoa(*conns)
			return exec.Command("aria2c", "-x", n, "-s", n, "-k", "1M", "--file-allocation=none", "--allow-overwrite=true",
				"--auto-file-renaming=false", "--console-log-level=warn", "--summary-interval=0", "-d", dl, "-o", "model.bin", url)
		}, false},
		{"curl", func() *exec.Cmd {
			return exec.Command("curl", "-sS", "--fail", "-o", filepath.Join(dl, "model.bin"), url)
		}, false},
	}
	if *only != "" {
		var keep = clients[:0]
		for _, c := range clients {
			if strings.Contains(","+*only+",", ","+strings.Fields(c.name)[0]+",") {
				keep = append(keep, c)
			}
		}
		clients = keep
	}
	res := map[string][]sample{}
	for r := range *repeats {
		for k := range clients {
			c := clients[(r+k)%len(clients)]
			// Every download starts from the same memory: the one before
			// removed and flushed, the page cache dropped (a cache full of
			// earlier downloads makes the next writer reclaim memory as it
			// writes) and the served file read back into it.
			os.RemoveAll(dls)
			dl = filepath.Join(dls, fmt.Sprintf("%d-%d", r, k))
			os.MkdirAll(dl, 0o755)
			syscall.Sync()
			dropped = dropCaches() && dropped
			fileDigest(filepath.Join(www, "model.bin"))
			time.Sleep(time.Second) // the file system's discards of what was removed
			waitQuiet()
			srvBefore := procCPU(srv.Process.Pid)
			machineBefore := machineCPU()
			cmd := c.cmd()
			var stderr, stdout bytes.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, &stdout
			start := time.Now()
			if err := cmd.Run(); err != nil {
				die("%s: %v\n%s", c.name, err, stderr.String())
			}
			wall := time.Since(start)
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			srvCPU := procCPU(srv.Process.Pid) - srvBefore
			s := sample{mibps: float64(*size) / (1 << 20) / wall.Seconds(), cpuPerGiB: cpu.Seconds() / (float64(*size) / (1 << 30)),
				serverPerGiB: srvCPU.Seconds() / (float64(*size) / (1 << 30))}
			// The others leave the file to the kernel's writeback: time
			// flushing it (engine fetch flushed before it exited).
			flush := time.Duration(0)
			if !c.self {
				t0 := time.Now()
				if out, err := exec.Command("sync", "-f", filepath.Join(dl, "model.bin")).CombinedOutput(); err != nil {
					die("sync -f: %v %s", err, out)
				}
				flush = time.Since(t0)
			}
			s.durable = float64(*size) / (1 << 20) / (wall + flush).Seconds()
			s.machinePerGiB = (machineCPU() - machineBefore).Seconds() / (float64(*size) / (1 << 30))
			// Every download is hashed; the tools that do not check
			// their bytes are timed for it apart.
			t0 := time.Now()
			got := fileDigest(filepath.Join(dl, "model.bin"))
			if !c.self {
				s.check = time.Since(t0)
			}
			if got != want {
				die("%s: the download's BLAKE3 %s, the file's %s", c.name, got, want)
			}
			if c.self {
				log.Printf("engine fetch: %s", strings.Join(strings.Fields(stdout.String()), " "))
			}
			log.Printf("repeat %d  %-12s %7.1f MiB/s (%7.1f on disk)  client CPU %.3f s/GiB  server CPU %.3f s/GiB  machine CPU %.3f s/GiB", r+1, c.name, s.mibps, s.durable, s.cpuPerGiB, s.serverPerGiB, s.machinePerGiB)
			res[c.name] = append(res[c.name], s)
		}
	}
	if d := build.Changed(); d != "" {
		log.Printf("the working tree changed during the run: %s", d)
	}
	if !dropped {
		log.Print("the page cache could not be dropped between downloads (not root?): the page says so")
	}
	page := render(build, *size, *conns, *repeats, res, treeRatio, dropped)
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", *out)
}

// writeRandom writes size random bytes to path and returns their BLAKE3.
func writeRandom(path string, size int64) integrity.Digest {
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{7})
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		b := buf[:min(int64(len(buf)), left)]
		rng.Read(b)
		if _, err := f.Write(b); err != nil {
			log.Fatal(err)
		}
	}
	f.Close()
	return fileDigest(path)
}

func fileDigest(path string) integrity.Digest {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	d, _, err := integrity.Sum(f)
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// discardAt takes a tree not kept.
type discardAt struct{}

func (discardAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// digestPass times the server's digest pass over the file (from the page
// cache) with the plain hash and with the outboard tree, 5 times each,
// interleaved, and returns the median CPU of each.
func digestPass(path string) [2]time.Duration {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	var plain, tree []time.Duration
	for range 5 {
		t0 := threadCPU()
		integrity.SumRange(f, 0, st.Size())
		plain = append(plain, threadCPU()-t0)
		t0 = threadCPU()
		integrity.SumOutboard(f, st.Size(), discardAt{})
		tree = append(tree, threadCPU()-t0)
	}
	slices.Sort(plain)
	slices.Sort(tree)
	return [2]time.Duration{plain[2], tree[2]}
}

// threadCPU is this process's CPU time (the hashing runs on one thread).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU is the CPU time every CPU spent busy so far (/proc/stat:
// all but idle and iowait).
func machineCPU() time.Duration {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		if i != 3 && i != 4 && i < 8 { // user nice system [idle iowait] irq softirq steal
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / 100
}

// procCPU is a process's CPU time from /proc/PID/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // clock ticks (USER_HZ = 100)
}

// dropCaches empties the page cache (as root); false when it could not.
func dropCaches() bool {
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0) == nil
}

// waitQuiet waits, up to two minutes, until the machine is idle (under 8%
// of its CPU busy over 300 ms): a sample is not taken beside other work.
func waitQuiet() {
	busy := func() float64 {
		read := func() []int64 {
			b, _ := os.ReadFile("/proc/stat")
			line, _, _ := strings.Cut(string(b), "\n")
			var v []int64
			for _, f := range strings.Fields(line)[1:] {
				n, _ := strconv.ParseInt(f, 10, 64)
				v = append(v, n)
			}
			return v
		}
		a := read()
		time.Sleep(300 * time.Millisecond)
		b := read()
		var total, idle int64
		for i := range min(len(a), len(b)) {
			total += b[i] - a[i]
			if i == 3 || i == 4 { // idle, iowait
				idle += b[i] - a[i]
			}
		}
		if total == 0 {
			return 0
		}
		return float64(total-idle) / float64(total)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		if busy() < 0.08 {
			return
		}
	}
	log.Print("the machine did not go quiet in 2 minutes; measuring anyway")
}

func waitHashed(url string) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Head(url)
		if err == nil {
			resp.Body.Close()
			if resp.Header.Get("Repr-Digest") != "" {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: not hashed after 2 minutes", url)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func render(b *bench.Build, size int64, conns, repeats int, res map[string][]sample, tree [2]time.Duration, dropped bool) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# Verified downloads: engine fetch against aria2c and curl\n\n")
	fmt.Fprintf(&w, "Generated by `go run ./bench/fetchcompare --size %d --connections %d --repeats %d` on %s.\n\n", size, conns, repeats, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&w, "- engine: %s.\n- Machine: %s. Client and server on the same machine, over loopback.\n", b.Describe(), bench.Machine())
	aria, _ := exec.Command("aria2c", "--version").Output()
	curl, _ := exec.Command("curl", "--version").Output()
	fmt.Fprintf(&w, "- Clients: `engine fetch` (this build), %s, %s.\n\n", bench.VersionLine(aria), bench.VersionLine(curl))
	fmt.Fprintf(&w, "One %d-byte file of random bytes, served by `engine serve` (plain HTTP/1.1) from the page cache, downloaded to a local disk by each client in turn, %d times, the order rotating each repeat, each download started from the same memory: the one before removed, a sync(2), the page cache dropped (a cache full of earlier downloads makes the next writer reclaim memory while it writes, which cost every client here 3 to 5 s of CPU per GiB), the served file read back into the cache, a second for the file system's discards, and then the machine was idle (under 8%% of its CPU busy over 300 ms, waited for up to 2 minutes). ", size, repeats)
	fmt.Fprintf(&w, "`engine fetch --connections %d` checks every 256 KiB group against the file's BLAKE3 tree before writing it, and the whole tree against the digest; `aria2c -x %d -s %d -k 1M` and `curl` (one connection) check nothing, so each of their downloads was hashed afterwards (BLAKE3 of the whole file, timed apart below). Every download of every client matched the file's BLAKE3, or the run would have stopped. ", conns, conns, conns)
	fmt.Fprintf(&w, "MiB/s is the file's size over the client's wall time, start to exit (engine fetch's includes its probe, its tree download and its final flush and rename). engine fetch flushes the file to disk before it puts it in place and exits, and records progress only for bytes on disk (so a resume after a power cut never trusts bytes that were lost); aria2c and curl leave their writes to the kernel, so \"MiB/s, on disk\" adds the time of `sync -f` on their file after they exit. Client CPU is the client process's user + system time (getrusage); server CPU the engine server's (/proc/PID/stat); machine CPU every CPU's busy time (/proc/stat) from the client's start until its file is on disk: it counts what the client CPU column cannot, the kernel's writeback threads writing aria2c's and curl's files, while engine fetch starts the writing of each range itself (sync_file_range), so that work is in its own client CPU. All per GiB of file; medians, with the range over repeats.\n\n")
	if !dropped {
		fmt.Fprintf(&w, "**The page cache could not be dropped between downloads** (the tool did not run as root): figures depend on what earlier downloads left in memory.\n\n")
	}
	fmt.Fprintf(&w, "| client | MiB/s | MiB/s, on disk | client CPU s/GiB | server CPU s/GiB | machine CPU s/GiB, until on disk | checks the bytes | hash afterwards (s) |\n|---|---:|---:|---:|---:|---:|---|---:|\n")
	order := []string{"engine fetch", "aria2c", "curl"}
	meds := map[string]float64{}
	for _, name := range order {
		ss := res[name]
		var mib, dur, cpu, srv, mach, chk []float64
		for _, s := range ss {
			mib, dur, cpu, srv, chk = append(mib, s.mibps), append(dur, s.durable), append(cpu, s.cpuPerGiB), append(srv, s.serverPerGiB), append(chk, s.check.Seconds())
			mach = append(mach, s.machinePerGiB)
		}
		meds[name], meds[name+" durable"] = median(mib), median(dur)
		checks, after := "every 256 KiB, as it lands", "—"
		if name != "engine fetch" {
			checks, after = "no", fmt.Sprintf("%.2f", median(chk))
		}
		fmt.Fprintf(&w, "| %s | %.0f (%.0f–%.0f) | %.0f | %.3f | %.3f | %.3f | %s | %s |\n", name, median(mib), slices.Min(mib), slices.Max(mib), median(dur), median(cpu), median(srv), median(mach), checks, after)
	}
	fmt.Fprintf(&w, "\nengine fetch / aria2c: **%.2f** (%.2f on disk); engine fetch / curl: %.2f (%.2f on disk) (MiB/s medians).\n\n",
		meds["engine fetch"]/meds["aria2c"], meds["engine fetch durable"]/meds["aria2c durable"], meds["engine fetch"]/meds["curl"], meds["engine fetch durable"]/meds["curl durable"])
	fmt.Fprintf(&w, "## The server's digest pass, with and without the tree\n\n")
	fmt.Fprintf(&w, "The engine hashes each file once, in the background; the outboard tree comes from the same read. Over the same %d bytes from the page cache, on one thread, medians of 5 interleaved: the plain BLAKE3 hash (`zeebo/blake3`, what the pass used before) %.3f s of CPU, the hash with the outboard tree (`lukechampine.com/blake3/bao`, 256 KiB groups, the pass now) %.3f s: the tree costs **%+.0f%%** of the pass (the bound: +5%%).\n\n",
		size, tree[0].Seconds(), tree[1].Seconds(), 100*(tree[1].Seconds()/tree[0].Seconds()-1))
	fmt.Fprintf(&w, "## What this page does not measure\n\n")
	fmt.Fprintf(&w, "- A real network: loopback has no loss, no latency and no bandwidth limit, so the clients are bound by CPU and the page cache; over a WAN, more connections matter more and the client CPU matters less.\n- TLS, HTTP/2 and HTTP/3 (`engine fetch --protocol`); aria2c speaks HTTP/1.1 and curl here does too.\n- Files larger than memory: here the file and the downloads stay in the page cache; a download to a disk slower than the network is bound by the disk for every client alike.\n- Resumes and repairs: the kill and repair tests (cmd/engine TestFetchKilled, TestFetchThroughLiars) check them; their cost is not timed here.\n")
	return w.String()
}
