package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clientVersion is what an external client says its version is, for the
// page; "" if it would not say.
func clientVersion(client string) string {
	var out []byte
	switch client {
	case clientCurl:
		out, _ = exec.Command("curl", "--version").Output()
	case clientWrk:
		// wrk -v prints its version and its usage, and exits 1.
		out, _ = exec.Command("wrk", "-v").CombinedOutput()
	case clientH2load:
		out, _ = exec.Command("h2load", "--version").Output()
	case clientSTime:
		out, _ = exec.Command("openssl", "version").Output()
	}
	return strings.TrimSpace(firstLine(string(out)))
}

// clientCommand is the command line a row runs, with placeholders for
// what differs from server to server and sample to sample.
func clientCommand(r row, sample time.Duration) string {
	var args []string
	switch r.client {
	case clientCurl:
		scheme := "http"
		if r.tls {
			scheme = "https"
		}
		// A sample's command; the hashed transfer has -o - instead.
		args = append([]string{"curl"}, curlArgs(r, scheme+"://127.0.0.1:PORT/"+r.file, "/dev/null")...)
		for i, a := range args {
			if a == curlWriteOut {
				args[i] = "'%{stderr}…'"
			}
		}
	case clientWrk:
		args = append([]string{"wrk"}, wrkArgs(r, "https://127.0.0.1:PORT/"+r.file, "summary.lua", wrkSampleLength(r, sample))...)
	case clientH2load:
		args = append([]string{"h2load"}, h2loadArgs(r, "https://127.0.0.1:PORT/"+r.file, 0)...)
		for i, a := range args {
			if a == "0" && args[i-1] == "-n" {
				args[i] = "N"
			}
		}
	case clientSTime:
		args = append([]string{"openssl"}, sTimeArgs("127.0.0.1:PORT", "/"+r.file, r.resume, sample)...)
	case "":
		// engine bench, in this process, with what main's bench.Config
		// sets; the same as this command line.
		args = []string{"engine", "bench", "--protocol", r.proto, "--connections", strconv.Itoa(r.connections)}
		if r.rate > 0 {
			args = append(args, "--rate", strconv.FormatFloat(r.rate, 'f', -1, 64))
		}
		args = append(args, "-k", "--manifest", "B3SUMS", "https://127.0.0.1:PORT/"+r.file)
	}
	return strings.Join(args, " ")
}

// clientChecks says exactly what made a sample of the row count.
func clientChecks(r row) string {
	switch r.client {
	case clientCurl:
		proto := "HTTP/1.1"
		if r.proto == "h2" {
			proto = "HTTP/2"
		}
		s := "The cell's first transfer, the warmup's first, is checked byte by byte: curl writes the body to a pipe (`-o -`) and this harness BLAKE3-hashes all of it as it arrives; it passes only when curl exited 0, its -w report says status 200 and " + proto +
			", the Content-Length header and curl's byte count (size_download) are the file's size, the harness read exactly that many bytes, and their digest is the fixture's (B3SUMS); if it fails, the cell fails with that reason. Every sample after it runs that command, which writes the body to /dev/null (`-o /dev/null`) so that the client is curl alone, and counts only when curl exited 0 and its -w report says status 200 and " + proto +
			", and Content-Length and size_download are the file's size: a sample's bytes are counted by curl, not hashed."
		if r.tls {
			s += " TLS 1.3 is required (--tlsv1.3)."
		}
		return s + " One transfer, on a new connection, is a sample; MiB/s is the file's size over curl's time from the request to the last byte (time_total − time_pretransfer: the connection and handshake are left out)."
	case clientWrk:
		s := "Status and length, not content (wrk parses responses but keeps no body to hash). A run counts only when wrk exited 0 and its own counters (printed by a Lua done() hook; no response() hook, which would make wrk keep bodies) show no connect, read, write or timeout error, no status of 400 or above (the only statuses wrk counts as errors: a 3xx would show as too few bytes), at least one response, and bytes read between responses × the file's size and (responses + connections in flight) × the whole response that a probe request with wrk's request line received before the samples (status 200, Content-Length and digest checked there). wrk reports no TLS version or suite: every server here offers TLS 1.3, which wrk's OpenSSL prefers, but it was not checked."
		if r.metric == "rps" {
			return s + " req/s is responses over wrk's run time; p99 is wrk's 99th percentile latency (closed loop: it does not include the queueing a slow server causes)."
		}
		return s + " A run lasts at least " + wrkBulkRun.String() + ", so that responses complete (wrk counts, and checks the status of, complete responses only). MiB/s is bytes read (response heads included, and the parts of the responses in flight at the end) over wrk's run time."
	case clientH2load:
		return "Status and length, not content (h2load keeps no body). With -n every request is accounted for: a run counts only when h2load reports TLSv1.3 and application protocol h2, all N requests done and succeeded, none failed, errored or timed out, N statuses 2xx, and exactly N × the file's size bytes of DATA. N is a multiple of the clients, chosen after a warmup run of one request per client so that a run lasts about one sample. MiB/s is DATA bytes over h2load's \"finished in\" time (connection set-up included)."
	case "":
		s := "Every byte: engine bench checks each response's status, its length and the BLAKE3 digest of its body against the fixtures' B3SUMS; a sample counts only when every response in it passed."
		if r.rate > 0 {
			s += fmt.Sprintf(" Open loop: requests are scheduled at a fixed %.0f per second, spread over the connections, whatever the server's speed, and each latency runs from the request's scheduled start to its last body byte, so a server that falls behind is charged for the queueing it causes. p50 and p99 are over the accepted samples' responses; \"failed\" is every response that failed a check (or never came) over all repeats, warmups included; server µs/req divides the server's CPU over the samples by their responses.", r.rate)
		}
		return s
	case clientSTime:
		mark := "every connection was marked `r` (resumed: s_time offers the previous connection's session, a TLS 1.3 ticket)"
		if !r.resume {
			mark = "no connection was marked `r` (-new never offers a session: each is a full handshake, marked `*`)"
		}
		served := "every connection it served"
		if r.resume {
			served += ", including -reuse's first, full, handshake in each process"
		}
		return "s_time sees no status: before the samples this harness sends s_time's request (`GET /" + r.file + " HTTP/1.0`, no Host) once itself and checks the response (status 200, Content-Length, digest, nothing after the body). A run of " + strconv.Itoa(r.connections) + " processes at once counts only when every process exited 0, read exactly its connections × that response's length in bytes, printed one mark per connection, and " + mark +
			". req/s is connections over the wall time from the start of the processes to the exit of the last (s_time ends its loop on a whole second of the clock, so they are started just after one). Server µs/req divides the server's CPU by " + served + "."
	}
	return ""
}

// externalSections are what only an external run has: how each row was
// measured and checked, and the resumption each s_time row saw.
func (p page) externalSections(b *strings.Builder) {
	b.WriteString("\n## How each row was measured\n\n")
	seen := map[string]bool{}
	for _, r := range p.rows {
		if r.client != "" && !seen[r.client] {
			seen[r.client] = true
			v := p.clientVersions[r.client]
			if v == "" {
				v = "version unknown"
			}
			fmt.Fprintf(b, "- %s: %s\n", r.client, v)
		}
	}
	b.WriteString("\n")
	for _, r := range p.rows {
		client := r.client
		if client == "" {
			client = "engine bench, in this harness's process"
		}
		fmt.Fprintf(b, "**%s** (%s). Client: %s, run as `%s`. Checked: %s\n\n", r.name, r.unit, client, clientCommand(r, p.sample), clientChecks(r))
	}
	var sTimeRows []int
	for i, r := range p.rows {
		if r.client == clientSTime {
			sTimeRows = append(sTimeRows, i)
		}
	}
	if len(sTimeRows) == 0 {
		return
	}
	b.WriteString("## TLS resumption, as s_time reported it\n\nTimed connections over the accepted samples of every repeat, and how many s_time marked as resumed (`r`).\n\n| server |")
	for _, i := range sTimeRows {
		fmt.Fprintf(b, " %s |", p.rows[i].name)
	}
	b.WriteString("\n|---|")
	for range sTimeRows {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, s := range p.servers {
		fmt.Fprintf(b, "| %s |", s.name)
		for _, i := range sTimeRows {
			c := p.cells[i][s.name]
			conns, resumed := c.resumption()
			switch {
			case c.cannot != "":
				fmt.Fprintf(b, " %s |", tableSafe(c.cannot))
			case conns == 0:
				b.WriteString(" no accepted sample |")
			default:
				fmt.Fprintf(b, " %s of %s resumed |", thousands(resumed), thousands(conns))
			}
		}
		b.WriteString("\n")
	}
}
