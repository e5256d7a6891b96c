package main

import (
	"testing"
)

func TestPerUnit(t *testing.T) {
	for _, tc := range []struct {
		metric          string
		n               uint64
		bytes, requests int64
		want            float64
		ok              bool
	}{
		// 100 MiB over one connection in 580 syscalls.
		{"mibps", 580, 100 << 20, 1, 5.8, true},
		{"mibps", 54, 100 << 20, 1, 0.54, true},
		{"rps", 3000, 1024 * 1000, 1000, 3, true},
		{"latency", 12000, 1024 * 4000, 4000, 3, true},
		{"mibps", 580, 0, 0, 0, false},
		{"rps", 3000, 1 << 20, 0, 0, false},
	} {
		got, ok := perUnit(tc.metric, tc.n, tc.bytes, tc.requests)
		if ok != tc.ok || (got-tc.want) > 1e-9 || (tc.want-got) > 1e-9 {
			t.Errorf("perUnit(%s, %d, %d, %d) = %v, %v; want %v, %v", tc.metric, tc.n, tc.bytes, tc.requests, got, ok, tc.want, tc.ok)
		}
	}
}

// TestServerUseSums: samples' differences add up; a count that went down
// between two readings, or was not read, is unknown, and stays unknown
// in the sum, and nothing is known over no sample.
func TestServerUseSums(t *testing.T) {
	read := func(ticks, wakeups, syscalls uint64) serverReading {
		return serverReading{ticks: ticks, wakeups: wakeups, syscalls: syscalls, ticksOK: true, wakeupsOK: true, syscallsOK: true}
	}
	a := read(100, 1000, 50000).since(read(50, 900, 40000))
	if want := (serverUse{cpu: 0.5, wakeups: 100, syscalls: 10000, cpuOK: true, wakeupsOK: true, syscallsOK: true}); a != want {
		t.Errorf("since = %+v, want %+v", a, want)
	}
	// A thread exited: the wake-ups went down.
	b := read(60, 899, 60000).since(read(50, 900, 40000))
	if !b.cpuOK || b.wakeupsOK || !b.syscallsOK {
		t.Errorf("since with fewer wake-ups after = %+v, want wake-ups unknown only", b)
	}
	noSys := read(60, 1000, 0)
	noSys.syscallsOK = false
	c := noSys.since(read(50, 900, 0))
	if c.syscallsOK {
		t.Errorf("since with syscalls unread = %+v, want them unknown", c)
	}
	sum := totalUse([]serverUse{a, a})
	if sum.wakeups != 200 || sum.syscalls != 20000 || sum.cpu != 1 || !sum.wakeupsOK || !sum.syscallsOK || !sum.cpuOK {
		t.Errorf("totalUse(a, a) = %+v", sum)
	}
	if sum := totalUse([]serverUse{a, b}); sum.wakeupsOK || !sum.syscallsOK {
		t.Errorf("totalUse(a, b) = %+v, want wake-ups unknown", sum)
	}
	if sum := totalUse(nil); sum.cpuOK || sum.wakeupsOK || sum.syscallsOK {
		t.Errorf("totalUse(none) = %+v, want nothing known", sum)
	}
	var o outcome
	o.setUse("mibps", serverUse{wakeups: 54, syscalls: 580, wakeupsOK: true}, 100<<20, 1)
	if o.hasSyscalls || !o.hasWakeups || o.wakeups != 0.54 {
		t.Errorf("setUse without syscalls: %+v", o)
	}
}
