//go:build linux

// Command lifecycle measures what clients see while a server reloads its
// configuration and upgrades its binary: small requests on keep-alive
// connections over HTTP/1.1, HTTP/2 and HTTP/3, and big downloads in
// flight, checked byte for byte. It runs the engine (SIGHUP, SIGUSR2)
// and nginx (HUP, USR2 then QUIT) through the same steps and prints, per
// phase, the requests, the failures and the latency percentiles.
//
//	go run ./bench/lifecycle -engine /tmp/engine [-nginx /usr/sbin/nginx] [-conns 64] [-reloads 20] [-upgrades 5]
//
// Each reload changes the site's root, the route's upstream and a limit;
// the next reload waits until new connections see all three. Each
// upgrade waits until the old process has drained and exited. What it
// does not measure: throughput (see bench/compare), a remote client (the
// load runs on the same machine and takes CPU from the server), and
// HTTP/3 on nginx (Debian 12's has none).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// plan is one run's steps.
type plan struct {
	conns    int           // keep-alive connections per protocol
	reloads  int           // reloads, each changing site, route and limit
	upgrades int           // binary upgrades
	steady   time.Duration // each steady phase (before, between, after)
	gap      time.Duration // between reloads
	bigSize  int64
	dlRate   int64 // bytes a second each download reads at
	broken   bool  // try a broken configuration after the reloads (engine only)
}

// run drives s through p under load and reports what the clients saw.
func run(s server, f *fixture, p plan, logf func(string, ...any)) (Report, error) {
	defer s.Stop() // a start that failed may have left a process
	if err := s.Start(0); err != nil {
		return Report{}, err
	}
	l := StartLoad(f.target(s.Protos()), p.conns)
	stopped := false
	defer func() {
		if !stopped {
			l.Stop()
		}
	}()
	downloads := func() {
		for _, proto := range s.Protos() {
			l.Download(proto, p.dlRate)
		}
	}
	time.Sleep(p.steady)
	l.Phase("reloads")
	for gen := 1; gen <= p.reloads; gen++ {
		if gen%5 == 1 {
			downloads()
			time.Sleep(100 * time.Millisecond)
		}
		if err := s.Reload(gen); err != nil {
			return Report{}, fmt.Errorf("reload %d: %w", gen, err)
		}
		logf("%s: reload %d served", s.Name(), gen)
		time.Sleep(p.gap)
	}
	if e, ok := s.(*engineServer); ok && p.broken {
		if err := e.BrokenReload(p.reloads); err != nil {
			return Report{}, err
		}
		logf("%s: a broken configuration was refused; generation %d serves on", s.Name(), p.reloads)
	}
	l.Phase("after reloads")
	time.Sleep(p.steady)
	l.Phase("upgrades")
	for u := 1; u <= p.upgrades; u++ {
		downloads()
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		if err := s.Upgrade(); err != nil {
			return Report{}, fmt.Errorf("upgrade %d: %w", u, err)
		}
		logf("%s: upgrade %d: the old process drained and exited after %s", s.Name(), u, time.Since(start).Round(time.Millisecond))
	}
	l.Phase("after")
	time.Sleep(p.steady)
	stopped = true
	return l.Stop(), nil
}

func main() {
	engineBin := flag.String("engine", "", "the engine binary (go build -o /tmp/engine ./cmd/engine)")
	nginxBin := flag.String("nginx", "/usr/sbin/nginx", "nginx, or \"\" to skip it")
	conns := flag.Int("conns", 64, "keep-alive connections per protocol")
	reloads := flag.Int("reloads", 20, "reloads")
	upgrades := flag.Int("upgrades", 5, "binary upgrades")
	steady := flag.Duration("steady", 5*time.Second, "each steady phase")
	bigMB := flag.Int64("big", 100, "big file size, MB")
	rounds := flag.Int("rounds", 1, "runs of each server, interleaved")
	protos := flag.String("protos", "h1,h2,h3", "protocols of the load (nginx: h1 and h2 of them)")
	flag.Parse()
	if *engineBin == "" {
		fmt.Fprintln(os.Stderr, "lifecycle: -engine BINARY is required")
		os.Exit(2)
	}
	p := plan{conns: *conns, reloads: *reloads, upgrades: *upgrades, steady: *steady, gap: 200 * time.Millisecond,
		bigSize: *bigMB * 1e6, dlRate: 40e6, broken: true}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	failed := false
	for r := 0; r < *rounds; r++ {
		want := strings.Split(*protos, ",")
		mk := []func(f *fixture) server{func(f *fixture) server { return &engineServer{f: f, bin: *engineBin, protos: want} }}
		if *nginxBin != "" {
			mk = append(mk, func(f *fixture) server { return &nginxServer{f: f, bin: *nginxBin, protos: want} })
		}
		if r%2 == 1 {
			mk[0], mk[len(mk)-1] = mk[len(mk)-1], mk[0]
		}
		for _, m := range mk {
			dir, err := os.MkdirTemp("", "lifecycle-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			f, err := newFixture(dir, p.bigSize)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			s := m(f)
			rep, err := run(s, f, p, logf)
			f.close()
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n--- log:\n%s\n", s.Name(), err, s.Log())
				failed = true
			} else {
				fmt.Println(rep.Text(fmt.Sprintf("%s, round %d: %d connections per protocol (%v), %d reloads, %d upgrades",
					s.Name(), r+1, p.conns, s.Protos(), p.reloads, p.upgrades)))
				failed = failed || rep.Failed() > 0 || len(rep.DLFailed) > 0
			}
			os.RemoveAll(dir)
		}
	}
	if failed {
		os.Exit(1)
	}
}
