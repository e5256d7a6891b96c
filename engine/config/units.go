package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written in the config as an integer or as a string
// with a unit: "64KiB", "1MiB", "1.5GiB", "4096", "10MB". Binary units
// (KiB, MiB, GiB, TiB and nginx's k, m, g) are powers of 1024; decimal
// units (KB, MB, GB, TB) are powers of 1000.
type Size int64

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// ParseSize parses a size as described on Size. Its errors, like those of
// Duration, carry no "config: " prefix: they are read after the file,
// line and key of the value (engine.toml:3: kernel.promote_after: ...).
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("%q is not a size; expected a number with an optional unit B, KiB, MiB, GiB or TiB, such as \"64KiB\" or \"1MiB\"", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size; expected a number with an optional unit B, KiB, MiB, GiB or TiB, such as \"64KiB\" or \"1MiB\"", s)
	}
	v := f * mult
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return Size(v), nil
}

// UnmarshalText lets the TOML decoder read a size from a string.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// String formats s with the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		n    Size
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if s >= u.n && s%u.n == 0 {
			return strconv.FormatInt(int64(s/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// Duration is a time span written in the config as a string with a unit:
// "30s", "5m", "1h30m", "250ms".
type Duration time.Duration

// UnmarshalText lets the TOML decoder read a duration from a string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%q is not a duration; expected a number with a unit, such as \"30s\", \"5m\" or \"250ms\"", b)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative; expected a duration such as \"30s\"", b)
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Grace is shutdown_grace: a duration, or "until done", where the drain
// waits for the responses in flight however long they take, as long as
// they move: each connection's own timeouts (send_timeout, a route's
// timeouts, a relay's idle_timeout) still end one that stalls.
type Grace struct {
	Duration
	UntilDone bool
}

// UnmarshalText reads a duration or "until done".
func (g *Grace) UnmarshalText(b []byte) error {
	if strings.TrimSpace(string(b)) == "until done" {
		*g = Grace{UntilDone: true}
		return nil
	}
	if err := g.Duration.UnmarshalText(b); err != nil {
		return fmt.Errorf("%v; or \"until done\" to wait for the responses in flight as long as they move", err)
	}
	return nil
}

// String is the grace as written.
func (g Grace) String() string {
	if g.UntilDone {
		return "until done"
	}
	return g.D().String()
}
