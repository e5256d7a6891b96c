package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/policy"
)

const signUsage = `Usage: engine sign -c engine.toml PATH [--key-id K] [--expires 2h] [--prefix] [--client-ip A] [--base URL]

Prints PATH with the query that signs it, for paths whose policy is
auth = "signed": append it to the site's origin (or give --base). The
signature is HMAC-SHA-256 with the [signing] key K over the path, its
expiry and the client address, if any (the README's "Signed URLs" gives
the format, for backends that sign in other languages).

PATH is the path as the site reads it: decoded, starting with "/", without
"." or ".." segments or repeated slashes; it is printed percent-encoded.
--prefix signs every path under PATH (which then ends in "/"): one URL
prefix for all of a model's shards, each fetched as PREFIX + name + query.

--expires takes a duration (90s, 30m, 2h, 7d) or a time (RFC 3339,
2027-01-31T00:00:00Z). --client-ip binds the URL to an address or prefix
(192.0.2.7, 2001:db8:1::/48): the engine refuses it from anywhere else.
`

func signCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("c", "engine.toml", "configuration file (its [signing] keys)")
	kid := fs.String("key-id", "", "the [signing] key to sign with (default: the only one)")
	expires := fs.String("expires", "1h", "when the URL stops working: a duration from now, or an RFC 3339 time")
	prefix := fs.Bool("prefix", false, "sign every path under PATH (a directory: ends in \"/\")")
	clientIP := fs.String("client-ip", "", "the address or prefix the URL is valid from")
	base := fs.String("base", "", "print a whole URL on this origin (https://models.example.com)")
	fs.Usage = func() { fmt.Fprint(stderr, signUsage, "\nflags:\n"); fs.PrintDefaults() }
	// Flags may follow PATH, as the usage line shows.
	var paths []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(paths) != 1 {
		fs.Usage()
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "engine sign: %v\n", err)
		return 2
	}
	if len(cfg.Signing.Keys) == 0 {
		fmt.Fprintf(stderr, "engine sign: %s has no [signing] keys; add keys = { k1 = \"/etc/engine/keys/k1\" }\n", cfg.File())
		return 2
	}
	keys, err := policy.LoadKeys(cfg.Signing.Keys)
	if err != nil {
		fmt.Fprintf(stderr, "engine sign: %v\n", err)
		return 2
	}
	if *kid == "" {
		ids := keys.IDs()
		if len(ids) != 1 {
			fmt.Fprintf(stderr, "engine sign: %s has %d keys (%s); choose one with --key-id\n", cfg.File(), len(ids), strings.Join(ids, ", "))
			return 2
		}
		*kid = ids[0]
	}
	exp, err := parseExpiry(*expires, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "engine sign: --expires: %v\n", err)
		return 2
	}
	req := policy.SignRequest{KeyID: *kid, Path: paths[0], Prefix: *prefix, Expires: exp}
	if *clientIP != "" {
		if req.IP, err = config.ParsePrefix(*clientIP); err != nil {
			fmt.Fprintf(stderr, "engine sign: --client-ip %q is not an address or prefix\n", *clientIP)
			return 2
		}
	}
	q, err := keys.Sign(req)
	if err != nil {
		fmt.Fprintf(stderr, "engine sign: %v\n", err)
		return 2
	}
	u := (&url.URL{Path: req.Path}).EscapedPath() + "?" + q
	if *base != "" {
		u = strings.TrimSuffix(*base, "/") + u
	}
	fmt.Fprintln(stdout, u)
	return 0
}

// parseExpiry reads --expires: a duration from now (Go's, or whole days
// such as "7d") or an RFC 3339 time, which must be after now.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return t, fmt.Errorf("%s is not in the future", s)
		}
		return t, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 36500 {
			return time.Time{}, fmt.Errorf("%q is not a number of days", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q is neither a positive duration (90s, 30m, 2h, 7d) nor an RFC 3339 time", s)
		}
	}
	// Rounded up to a whole second: the expiry is in seconds, and a URL
	// must live at least as long as asked.
	return now.Add(d + time.Second - 1).Truncate(time.Second), nil
}
