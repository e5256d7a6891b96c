package peershare

import (
	"net/netip"
	"sync"
	"testing"
)

func TestLimitAndRelease(t *testing.T) {
	tb := New(2, 0, nil)
	a := netip.MustParseAddr("127.0.0.2")
	k1, ok1 := tb.Acquire(a)
	k2, ok2 := tb.Acquire(a)
	if !ok1 || !ok2 {
		t.Fatal("the first two holdings were refused")
	}
	if _, ok := tb.Acquire(a); ok {
		t.Fatal("a third holding was admitted over a limit of 2")
	}
	if _, ok := tb.Acquire(netip.MustParseAddr("127.0.0.3")); !ok {
		t.Fatal("another address was refused")
	}
	tb.Release(k1)
	if _, ok := tb.Acquire(a); !ok {
		t.Fatal("refused after a release")
	}
	tb.Release(k2)
	if got := tb.Held(a); got != 1 {
		t.Fatalf("held %d, want 1", got)
	}
	if tb.Refused() != 1 {
		t.Fatalf("refused %d, want 1", tb.Refused())
	}
}

func TestIPv6ByPrefix(t *testing.T) {
	tb := New(1, 0, nil)
	if _, ok := tb.Acquire(netip.MustParseAddr("2001:db8:1:2::1")); !ok {
		t.Fatal("first refused")
	}
	if _, ok := tb.Acquire(netip.MustParseAddr("2001:db8:1:2:ffff::9")); ok {
		t.Fatal("another address of the same /64 was admitted")
	}
	if _, ok := tb.Acquire(netip.MustParseAddr("2001:db8:1:3::1")); !ok {
		t.Fatal("another /64 was refused")
	}
	// IPv4 mapped into IPv6 (a dual-stack socket) counts as the IPv4
	// address, not as the ::ffff:0:0/64 every IPv4 client shares.
	tb4 := New(1, 0, nil)
	tb4.Acquire(netip.MustParseAddr("::ffff:10.0.0.1"))
	if _, ok := tb4.Acquire(netip.MustParseAddr("::ffff:10.0.0.2")); !ok {
		t.Fatal("two IPv4 clients on a dual-stack socket share one count")
	}
	if _, ok := tb4.Acquire(netip.MustParseAddr("10.0.0.1")); ok {
		t.Fatal("an IPv4 address mapped and not mapped counted apart")
	}
}

func TestExempt(t *testing.T) {
	tb := New(1, 0, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	for range 5 {
		k, ok := tb.Acquire(netip.MustParseAddr("10.1.2.3"))
		if !ok || k.IsValid() {
			t.Fatal("an exempt address was counted")
		}
		tb.Release(k)
	}
	if tb.Addresses() != 0 {
		t.Fatal("exempt address left a key")
	}
}

func TestConcurrent(t *testing.T) {
	tb := New(50, 0, nil)
	a := netip.MustParseAddr("192.0.2.1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if k, ok := tb.Acquire(a); ok {
					mu.Lock()
					admitted++
					if tb.Held(a) > 50 {
						t.Error("over the limit")
					}
					mu.Unlock()
					tb.Release(k)
				}
			}
		})
	}
	wg.Wait()
	if tb.Held(a) != 0 || tb.Addresses() != 0 || admitted == 0 {
		t.Fatalf("held %d, addresses %d, admitted %d", tb.Held(a), tb.Addresses(), admitted)
	}
}
