package testnet

import "testing"

// RefusedAddr returns a 127.0.0.1 TCP address where a connection is
// refused (ECONNREFUSED) until the test ends. The port is held by a
// socket bound there that never listens, so no other test or process can
// take it meanwhile: a port found free and closed again can be, and then
// a test of an unreachable upstream gets an answer.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	addr, release, err := refusedAddr()
	if err != nil {
		t.Fatalf("testnet: a refused address: %v", err)
	}
	t.Cleanup(release)
	return addr
}
