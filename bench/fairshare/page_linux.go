package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/stats"
)

// render writes the page: one table per attack, the servers as rows.
func render(h *bench.Harness, pin string, servers []server, chosen []attack, res results, repeats, addrs, perAddr, capacity int, ramp time.Duration, header, idle, send string) string {
	var w strings.Builder
	bench.WriteHead(&w, "A fair share for every client: attacks from many addresses, the engine against nginx",
		fmt.Sprintf("go run ./bench/fairshare --repeats %d --addrs %d --per-addr %d --capacity %d --ramp %s", repeats, addrs, perAddr, capacity, ramp),
		time.Now().UTC(), h.Preamble(), h.TreeNote())
	ngxV, _ := exec.Command("nginx", "-v").CombinedOutput()
	fmt.Fprintf(&w, "Peer: %s. %s\n\n", bench.VersionLine(ngxV), pin)
	fmt.Fprintf(&w, "Each attack comes from %d loopback addresses (127.2.x.y) with %d connections each unless its row says otherwise, %d in all against a capacity of %d connections, and its connections come back %v after the server closes them. The attackers run in a process of their own at the lowest priority (`nice -n 19`) on the client's CPU, so that their own TLS and QUIC work does not take the honest client's CPU (attackers are other machines), and their TCP connections announce an Ethernet MSS (1460) as remote clients do: with loopback's 64 KiB MSS the server's kernel sized each socket's send buffer about 45 times larger, and a thousand slow readers put every socket of the machine under TCP memory pressure, which is loopback's doing, not the servers'. After %v of attack, an honest client on 127.1.0.1 downloads a 100 MiB file over HTTP/1.1, HTTP/2 and HTTP/3 (HTTP/3 on the engine only: Debian's nginx has none), one after the other, each on a new connection and checked against the file's SHA-256; meanwhile, and for 10 s at least, it asks for a 1 KiB file every 250 ms, each on a new TLS connection, every other one through the reverse proxy (to the same origin for both servers), checked byte for byte. A 1 KiB request that fails or takes %v counts as %v. Memory is the servers' resident set (nginx's master and worker together), sampled every 250 ms while the honest client ran; each server is one process for the whole run, so a row's figure includes what the process kept from the rows before it. CPU is the servers' share of one CPU over that time. \"Attack connections made\" counts the attackers' TCP connections (silent), completed TLS handshakes or completed QUIC handshakes, over the attack. The servers took turns in an order that rotated each repeat, %d repeats; figures are medians over repeats (the worst for the 1 KiB requests).\n\n",
		addrs, perAddr, addrs*perAddr, capacity, reconnectPause, ramp, failedAfter, failedAfter, repeats)
	fmt.Fprintf(&w, "**The engine**: its defaults (max_connections_per_address = max_connections/8, min_send_rate 4 KiB/s over 20 s, the fair share at max_connections, HTTP/2 control-frame budget, QUIC Retry under pressure, WebTransport max_sessions 64 and max_sessions_per_address 16) with `max_connections = %d`, one worker, the reverse proxy route at `max_conns = 64`. **nginx**: one worker, `worker_connections %d` (nginx counts its upstream connections there too), `limit_conn` %d per address (the engine's default share), `reset_timedout_connection on`, `upstream ... max_conns=64 keepalive 64`. Both: header timeout %s, keep-alive timeout %s, send timeout %s.\n\n",
		capacity, capacity, max(64, capacity/8), header, idle, send)
	fmt.Fprintf(&w, "The goal: under each attack the honest download keeps at least half of its unattacked speed, and every 1 KiB request is answered within 1 s. The engine's memory bound is `[limits] memory_limit`, Go's soft limit, by default 64 MiB plus 320 KiB per max_connections: %d MiB here.\n\n", 64+capacity*320/1024)
	base := map[string]map[string]float64{}
	for _, s := range servers {
		base[s.name] = map[string]float64{}
		for _, p := range []string{"h1", "h2", "h3"} {
			base[s.name][p] = medianOf(res[[2]string{s.name, "none"}], func(c cell) (float64, bool) { v, ok := c.mibps[p]; return v, ok })
		}
	}
	for _, a := range chosen {
		fmt.Fprintf(&w, "## %s\n\n", strings.ToUpper(a.name[:1])+a.name[1:])
		if a.run != nil {
			n, pa := addrs, perAddr
			if a.addrs > 0 {
				n = a.addrs
			}
			if a.perAdr > 0 {
				pa = a.perAdr
			}
			fmt.Fprintf(&w, "%s; %d addresses × %d.\n\n", strings.ToUpper(a.what[:1])+a.what[1:], n, pa)
		} else {
			fmt.Fprintf(&w, "%s.\n\n", strings.ToUpper(a.what[:1])+a.what[1:])
		}
		fmt.Fprintf(&w, "| server | HTTP/1.1 MiB/s (× unattacked) | HTTP/2 | HTTP/3 | 1 KiB: worst, ms | over 1 s or failed | p50, ms | peak RSS, MiB | CPU | attack connections made |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range servers {
			cs := res[[2]string{s.name, a.name}]
			if len(cs) == 0 {
				fmt.Fprintf(&w, "| %s | not run: %s |\n", s.name, notRun(s, a))
				continue
			}
			col := func(p string) string {
				v := medianOf(cs, func(c cell) (float64, bool) { x, ok := c.mibps[p]; return x, ok })
				if v == 0 {
					for _, c := range cs {
						if e, ok := c.dlErr[p]; ok {
							return "failed (" + e + ")"
						}
					}
					return "—"
				}
				if a.run == nil || base[s.name][p] == 0 {
					return fmt.Sprintf("%.0f", v)
				}
				return fmt.Sprintf("%.0f (%.2f×)", v, v/base[s.name][p])
			}
			var all []time.Duration
			over, n, failed := 0, 0, 0
			for _, c := range cs {
				all = append(all, c.small...)
				failed += c.smallFailed
			}
			for _, d := range all {
				n++
				if d > time.Second {
					over++
				}
			}
			worst, p50 := 0.0, 0.0
			if len(all) > 0 {
				worst = float64(slices.Max(all)) / 1e6
				ms := make([]float64, len(all))
				for i, d := range all {
					ms[i] = float64(d) / 1e6
				}
				p50 = stats.Median(ms)
			}
			rss := medianOf(cs, func(c cell) (float64, bool) { return c.rssPeak, true })
			cpu := medianOf(cs, func(c cell) (float64, bool) { return c.cpu, true })
			opened := medianOf(cs, func(c cell) (float64, bool) { return float64(c.opened), true })
			fmt.Fprintf(&w, "| %s | %s | %s | %s | %.0f | %d of %d (%d failed) | %.1f | %.0f | %.0f%% | %.0f |\n", s.name, col("h1"), col("h2"), col("h3"), worst, over, n, failed, p50, rss, cpu*100, opened)
		}
		if a.wt {
			for _, s := range servers {
				cs := res[[2]string{s.name, a.name}]
				ok, tried := 0, 0
				for _, c := range cs {
					ok += c.wtOK
					tried += c.wtTried
				}
				if tried > 0 {
					fmt.Fprintf(&w, "\nThe honest client's own WebTransport sessions during the attack (%s): %d of %d opened.\n", s.name, ok, tried)
				}
			}
		}
		w.WriteString("\n")
	}
	fmt.Fprintf(&w, "## What this page does not measure\n\n- A real network: attackers, the honest client and both servers share one machine's loopback; the attackers run at the lowest priority on the honest client's CPU.\n- Kernel TLS: this machine's kernel has none, so both servers encrypt in user space.\n- Spoofed source addresses (loopback cannot spoof): QUIC's Retry under pressure is counted by the engine (`engine_quic_retries_total`), not attacked.\n- Attacks from more addresses than the capacity has slots (each address then holds one connection, and the fair share has nobody to take from), and attackers that read at min_send_rate or faster.\n- HTTP/3 and WebTransport on nginx: Debian's nginx has no HTTP/3.\n")
	return w.String()
}

func notRun(s server, a attack) string {
	switch {
	case a.wt && !s.wt:
		return "no WebTransport"
	case a.quic && !s.h3:
		return "no HTTP/3 in Debian's nginx"
	}
	return "—"
}

// medianOf is the median of f over the cells where it has a value.
func medianOf(cs []cell, f func(cell) (float64, bool)) float64 {
	var v []float64
	for _, c := range cs {
		if x, ok := f(c); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0
	}
	return stats.Median(v)
}
