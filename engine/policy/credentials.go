package policy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Credentials are the users (basic) or tokens (bearer) of one file.
// Immutable but for the cache of verified passwords.
type Credentials struct {
	File   string
	basic  bool
	users  map[string]string   // basic: user -> hash
	tokens map[[32]byte]string // bearer: SHA-256 of the token -> its name

	// Verified basic credentials, so that a password hash (bcrypt: tens
	// of milliseconds on purpose) is computed once per credential, not
	// per request. Keyed by a keyed hash of "user:password", so the
	// cache holds no password.
	mu    sync.Mutex
	known map[[32]byte]verdict
	salt  [32]byte
	// dummy is a listed user's hash, checked for a user that is not
	// listed: an unknown name takes as long as a wrong password, so
	// timing does not tell which names exist.
	dummy string
	// pending counts the checks waiting or running, by client address
	// (IPv6 by /64) and in all: one client's crowd of wrong passwords
	// gets its own few slots, and is refused past them, instead of
	// queueing every other client's check behind its own.
	pending      map[netip.Addr]int
	pendingTotal int
}

// Bounds of the checks waiting or running: per client address, and in
// all.
const (
	pendingPerClient = 4
	pendingMax       = 256
)

type verdict struct {
	ok    bool
	until time.Time
}

// knownMax bounds the cache of verified credentials; past it the cache
// starts over (a crowd of wrong passwords cannot grow it without end).
const knownMax = 4096

// knownBadFor is how long a wrong password is remembered: long enough
// that the request that waited for its hash finds it.
const knownBadFor = 10 * time.Second

var hashSlots = make(chan struct{}, runtime.NumCPU())

// maxCredFile bounds a credentials file.
const maxCredFile = 16 << 20

// LoadCredentials reads a credentials file for auth "basic" or "bearer".
// Mistakes name the file and the line.
func LoadCredentials(name string, basic bool) (*Credentials, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	if len(data) > maxCredFile {
		return nil, fmt.Errorf("%s: %d bytes; at most %d", name, len(data), maxCredFile)
	}
	c := &Credentials{File: name, basic: basic, known: map[[32]byte]verdict{}, pending: map[netip.Addr]int{}}
	rand.Read(c.salt[:])
	if basic {
		c.users = map[string]string{}
	} else {
		c.tokens = map[[32]byte]string{}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		who, rest, ok := strings.Cut(line, ":")
		if !ok || who == "" {
			return nil, fmt.Errorf("%s:%d: expected %s", name, n, credForm(basic))
		}
		if basic {
			if err := checkHash(rest); err != nil {
				return nil, fmt.Errorf("%s:%d: user %s: %v", name, n, who, err)
			}
			if _, dup := c.users[who]; dup {
				return nil, fmt.Errorf("%s:%d: user %s is listed twice", name, n, who)
			}
			c.users[who] = rest
			if c.dummy == "" {
				c.dummy = rest
			}
			continue
		}
		alg, h, _ := strings.Cut(rest, ":")
		sum, err := hex.DecodeString(h)
		if alg != "sha256" || err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("%s:%d: expected %s (make HEX with: printf %%s TOKEN | sha256sum)", name, n, credForm(basic))
		}
		c.tokens[[32]byte(sum)] = who
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return c, nil
}

func credForm(basic bool) string {
	if basic {
		return "\"user:HASH\" with a bcrypt ($2y$..., htpasswd -B) or argon2id ($argon2id$...) hash"
	}
	return "\"name:sha256:HEX\", HEX the SHA-256 of the token"
}

// checkHash refuses a password hash the engine cannot check.
func checkHash(h string) error {
	switch {
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		if _, err := bcrypt.Cost([]byte(h)); err != nil {
			return fmt.Errorf("bcrypt hash unreadable: %v", err)
		}
		return nil
	case strings.HasPrefix(h, "$argon2id$"):
		_, err := parseArgon2(h)
		return err
	}
	return errors.New("the hash is neither bcrypt ($2a$, $2b$, $2y$) nor argon2id ($argon2id$); plain-text, MD5 and SHA-1 passwords are not accepted")
}

// Bearer returns the name of the token, or "" when it is not listed.
func (c *Credentials) Bearer(token []byte) string {
	if c == nil || c.basic || len(token) == 0 {
		return ""
	}
	return c.tokens[sha256.Sum256(token)]
}

// Result of a basic credential check.
type Result uint8

const (
	Unknown Result = iota // not checked yet: Verify it (slow)
	Good
	Bad
)

func (c *Credentials) key(user, pass []byte) [32]byte {
	h := sha256.New()
	h.Write(c.salt[:])
	h.Write(user)
	h.Write([]byte{0})
	h.Write(pass)
	return [32]byte(h.Sum(nil))
}

// Cached says what is known of user and pass without hashing: Good or
// Bad when a Verify found it, Unknown otherwise (a user that is not
// listed too: it is checked as long as one that is).
func (c *Credentials) Cached(user, pass []byte, now time.Time) Result {
	if c == nil || !c.basic || c.dummy == "" {
		return Bad
	}
	k := c.key(user, pass)
	c.mu.Lock()
	v, ok := c.known[k]
	c.mu.Unlock()
	switch {
	case !ok || !v.until.IsZero() && now.After(v.until):
		return Unknown
	case v.ok:
		return Good
	}
	return Bad
}

// Verify checks user and pass against the password hash, which takes a
// worker's time (call it off the reactor), and remembers the answer.
func (c *Credentials) Verify(user, pass []byte) bool {
	if c == nil || !c.basic {
		return false
	}
	h, listed := c.users[string(user)]
	if !listed {
		h = c.dummy
	}
	// At most one hash per CPU at once: a crowd of wrong passwords
	// queues here instead of taking every CPU (and, with argon2id, its
	// memory) from the reactors.
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	good := false
	if strings.HasPrefix(h, "$argon2id$") {
		a, err := parseArgon2(h)
		good = err == nil && a.check(pass)
	} else {
		good = bcrypt.CompareHashAndPassword([]byte(h), pass) == nil
	}
	good = good && listed
	v := verdict{ok: good}
	if !good {
		v.until = time.Now().Add(knownBadFor)
	}
	k := c.key(user, pass)
	c.mu.Lock()
	if len(c.known) >= knownMax {
		clear(c.known)
	}
	c.known[k] = v
	c.mu.Unlock()
	return good
}

// clientKey is what pending counts a client by: its address, an IPv6
// one by its /64 (one host's share of addresses).
func clientKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// Admit takes a slot for a check from client; false when the client, or
// everyone together, has too many waiting. Release gives it back.
func (c *Credentials) Admit(client netip.Addr) bool {
	k := clientKey(client)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[k] >= pendingPerClient || c.pendingTotal >= pendingMax {
		return false
	}
	c.pending[k]++
	c.pendingTotal++
	return true
}

// Release gives back a slot Admit took.
func (c *Credentials) Release(client netip.Addr) {
	k := clientKey(client)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[k]--; c.pending[k] <= 0 {
		delete(c.pending, k)
	}
	c.pendingTotal--
}

// ParseBasic reads an Authorization value "Basic base64(user:pass)".
func ParseBasic(v []byte) (user, pass []byte, ok bool) {
	const prefix = "basic "
	if len(v) < len(prefix) || !strings.EqualFold(string(v[:len(prefix)]), prefix) {
		return nil, nil, false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(v[len(prefix):])))
	if err != nil {
		return nil, nil, false
	}
	u, p, ok := bytes.Cut(dec, []byte(":"))
	return u, p, ok
}

// ParseBearer reads an Authorization value "Bearer TOKEN".
func ParseBearer(v []byte) ([]byte, bool) {
	const prefix = "bearer "
	if len(v) <= len(prefix) || !strings.EqualFold(string(v[:len(prefix)]), prefix) {
		return nil, false
	}
	t := bytes.TrimSpace(v[len(prefix):])
	return t, len(t) > 0
}

// argon2id is a parsed "$argon2id$v=19$m=65536,t=3,p=4$SALT$HASH".
type argon2id struct {
	m, t      uint32
	p         uint8
	salt, sum []byte
}

func parseArgon2(h string) (*argon2id, error) {
	parts := strings.Split(h, "$")
	if len(parts) != 6 || parts[1] != "argon2id" || parts[2] != "v=19" {
		return nil, errors.New("argon2id hash unreadable; expected $argon2id$v=19$m=...,t=...,p=...$SALT$HASH")
	}
	a := &argon2id{}
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("argon2id parameter %q unreadable", kv)
		}
		switch k {
		case "m":
			a.m = uint32(n)
		case "t":
			a.t = uint32(n)
		case "p":
			if n > 255 {
				return nil, errors.New("argon2id parallelism above 255")
			}
			a.p = uint8(n)
		}
	}
	// Bounds, so that a hash in the file cannot make each check cost
	// minutes or gigabytes.
	if a.m < 8 || a.m > 1<<20 || a.t < 1 || a.t > 16 || a.p < 1 || a.p > 16 {
		return nil, errors.New("argon2id parameters out of range (m 8 to 1048576 KiB, t 1 to 16, p 1 to 16)")
	}
	var err error
	if a.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(a.salt) < 8 {
		return nil, errors.New("argon2id salt unreadable")
	}
	if a.sum, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(a.sum) < 16 || len(a.sum) > 64 {
		return nil, errors.New("argon2id hash unreadable")
	}
	return a, nil
}

func (a *argon2id) check(pass []byte) bool {
	got := argon2.IDKey(pass, a.salt, a.t, a.m, a.p, uint32(len(a.sum)))
	return subtle.ConstantTimeCompare(got, a.sum) == 1
}
