package fetch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mediaship/engine/integrity"
)

// Config is one download. The zero value of each field is its documented
// default.
type Config struct {
	URL     string
	Mirrors []string // more servers of the same file
	// Path is where the file goes. PATH.part holds it while it arrives,
	// PATH.part.state records its checked groups, PATH.part.obao keeps
	// the tree for a resume.
	Path string
	// Connections is how many ranges are fetched at once, spread over the
	// sources. Zero means 8.
	Connections int
	// NewClient makes the client of one connection (each worker has its
	// own per source, so each holds one connection). Required.
	NewClient func() *http.Client
	// Digest is the root digest to trust, learned by the caller
	// (DigestFrom says how). Nil takes the server's Repr-Digest, which
	// proves integrity in transit, not authenticity.
	Digest     *integrity.Digest
	DigestFrom string
	// SHA256, when set, is checked too, over the whole file once every
	// group has checked (SHA-256 has no tree): a file that does not match
	// is not put in place.
	SHA256 *integrity.SHA256
	// Resume continues PATH.part. Without it, an existing PATH.part is an
	// error, never overwritten.
	Resume bool
	// Stall ends a request that received nothing for this long. Zero
	// means 30s.
	Stall time.Duration
	// Attempts bounds how often one group is fetched after failing its
	// check. Zero means 5.
	Attempts int
	// BadGroups is how many groups a source may send wrong before it is
	// dropped. Zero means 3.
	BadGroups int
	// Progress is called about ten times a second while bytes arrive.
	Progress func(Progress)
	Log      *slog.Logger
}

// Progress is a snapshot of a download.
type Progress struct {
	Bytes, Size  int64 // bytes checked and written (or found), of Size
	Done, Groups int64
	Sources      int // still serving
}

// Result is what a download did, for the summary and --json.
type Result struct {
	URL       string         `json:"url"`
	Path      string         `json:"path"`
	Size      int64          `json:"size"`
	Blake3    string         `json:"blake3"`
	Trusted   string         `json:"trusted"` // where the digest came from
	Verified  bool           `json:"verified"`
	SHA256    string         `json:"sha256,omitempty"` // checked against --sha256
	GroupSize int64          `json:"group_size"`
	Groups    int64          `json:"groups"`
	Resumed   int64          `json:"groups_resumed"`        // recorded as checked by an earlier run
	Rechecked int64          `json:"groups_rechecked"`      // found in the part file and checked again
	EndChecks int64          `json:"groups_checked_at_end"` // recorded by an earlier run, read back and checked before the file was put in place
	Fetched   int64          `json:"bytes_fetched"`         // range bodies received
	Refetched int64          `json:"bytes_refetched"`       // of those, bytes not kept (a failed check, a broken request)
	Retried   int64          `json:"groups_retried"`        // groups fetched again after failing their check
	TreeBytes int64          `json:"tree_bytes"`
	Seconds   float64        `json:"seconds"`
	MiBps     float64        `json:"mib_per_s"` // bytes fetched and kept per second
	Sources   []SourceReport `json:"sources"`
}

// SourceReport is one source's share.
type SourceReport struct {
	URL         string  `json:"url"`
	Bytes       int64   `json:"bytes"`
	MiBps       float64 `json:"mib_per_s"`
	WrongGroups int     `json:"wrong_groups"`
	Failures    int     `json:"failures"`
	Dropped     string  `json:"dropped,omitempty"`
}

// The three ways a download ends badly, for exit codes: the bytes could
// not be verified, no server could deliver them, or the local side failed.
var (
	ErrUnverified = errors.New("could not verify")
	ErrNetwork    = errors.New("network")
	ErrLocal      = errors.New("local")
)

// run is one download in progress.
type run struct {
	cfg     Config
	sources []*Source
	tree    *integrity.Outboard
	part    *os.File
	st      *state
	log     *slog.Logger
	cancel  context.CancelCauseFunc
	started time.Time

	mu       sync.Mutex // guards the fields below
	cond     *sync.Cond // signalled when work is queued or the download ends
	recorded []int64    // groups a state file recorded: checked again at the end
	queue    []span     // groups to fetch, in order
	retries  []span     // single groups that failed their check
	attempts map[int64]int
	inflight int
	done     int64 // groups verified
	doneB    int64 // their bytes
	written  int64 // bytes written by this run
	fetched  int64
	retried  int64
	failed   error // the first fatal error
}

// span is a run of groups [first, last] to fetch in one request; avoid
// is the source that sent a group of it wrong, tried last.
type span struct {
	first, last int64
	avoid       *Source
}

// Run downloads cfg.URL to cfg.Path.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Connections <= 0 {
		cfg.Connections = 8
	}
	if cfg.Stall <= 0 {
		cfg.Stall = 30 * time.Second
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 5
	}
	if cfg.BadGroups <= 0 {
		cfg.BadGroups = 3
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &run{cfg: cfg, log: cfg.Log, cancel: cancel, attempts: map[int64]int{}, started: time.Now()}
	r.cond = sync.NewCond(&r.mu)
	res := &Result{URL: cfg.URL, Path: cfg.Path}
	err := r.download(ctx, res)
	r.report(res)
	return res, err
}

func (r *run) download(ctx context.Context, res *Result) error {
	if err := r.probe(ctx); err != nil {
		return err
	}
	size := r.sources[0].size
	if err := r.roomFor(size); err != nil {
		return err
	}
	if err := r.awaitDigest(ctx); err != nil {
		return err
	}
	root, err := r.trust(res)
	if err != nil {
		return err
	}
	res.Size, res.Blake3 = size, root.String()
	if err := r.loadTree(ctx, root, size, res); err != nil {
		return err
	}
	res.GroupSize, res.Groups = r.tree.GroupSize(), r.tree.Groups()
	if err := r.openPart(res); err != nil {
		return err
	}
	defer r.part.Close()
	if res.Rechecked > 0 {
		// What was checked again need not be checked a third time.
		if err := r.checkpoint(); err != nil {
			return fmt.Errorf("%w: recording progress: %v", ErrLocal, err)
		}
	}
	r.started = time.Now()
	for round := 0; ; round++ {
		r.plan()
		if err := r.fetchAll(ctx); err != nil {
			return err
		}
		// Every group this run did not check itself (a state file
		// recorded it) is read back and checked before the file is put
		// in place; one that fails (the part file changed while no
		// fetch ran) is fetched again, once.
		bad, err := r.checkRecorded(res)
		if err != nil {
			return err
		}
		res.Resumed -= int64(bad) // fetched again, not resumed
		if bad == 0 {
			break
		}
		if round > 0 {
			return fmt.Errorf("%w: %d groups of %s.part changed on disk again", ErrLocal, bad, r.cfg.Path)
		}
		r.log.Warn("groups recorded as checked no longer match on disk; fetching them again", "groups", bad, "part", r.cfg.Path+".part")
	}
	return r.finish(res)
}

// fetchAll runs the workers over the queued groups and records what they
// checked.
func (r *run) fetchAll(ctx context.Context) error {
	stop := make(chan struct{})
	var saver sync.WaitGroup
	saver.Add(1)
	go func() {
		defer saver.Done()
		r.checkpoints(stop)
	}()
	var wg sync.WaitGroup
	for i := range r.cfg.Connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx, i)
		}()
	}
	wg.Wait()
	close(stop)
	saver.Wait()
	r.mu.Lock()
	failed, done := r.failed, r.done
	r.mu.Unlock()
	if err := r.checkpoint(); err != nil && failed == nil {
		failed = fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if failed != nil {
		return failed
	}
	if done != r.tree.Groups() {
		return fmt.Errorf("%w: %d of %d groups checked", ErrNetwork, done, r.tree.Groups())
	}
	return nil
}

// checkRecorded reads back and checks the groups a state file recorded
// and marks those that fail as not done; it returns how many failed.
func (r *run) checkRecorded(res *Result) (int, error) {
	buf := make([]byte, r.tree.GroupSize())
	bad := 0
	for _, i := range r.recorded {
		off, n := r.tree.Group(i)
		if _, err := r.part.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: reading %s.part: %v", ErrLocal, r.cfg.Path, err)
		}
		res.EndChecks++
		if r.tree.Verify(i, buf[:n]) != nil {
			r.st.clear(i)
			r.done--
			r.doneB -= n
			bad++
		}
	}
	r.recorded = nil
	return bad, nil
}

// probe asks every source for the file and keeps those that agree on its
// size with the first that answered.
func (r *run) probe(ctx context.Context) error {
	urls := append([]string{r.cfg.URL}, r.cfg.Mirrors...)
	var live []*Source
	var why []string
	for _, u := range urls {
		s := &Source{URL: u}
		r.sources = append(r.sources, s)
		c := r.cfg.NewClient()
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Stall)
		err := s.probe(pctx, c)
		cancel()
		c.CloseIdleConnections()
		switch {
		case err != nil:
			s.drop(fmt.Sprintf("probe: %v", err))
		case len(live) > 0 && s.size != live[0].size:
			s.drop(fmt.Sprintf("has %d bytes where %s has %d", s.size, live[0].URL, live[0].size))
		default:
			live = append(live, s)
			continue
		}
		why = append(why, s.URL+": "+s.dropped)
	}
	if len(live) == 0 {
		return fmt.Errorf("%w: no source answered a range request: %s", ErrNetwork, strings.Join(why, "; "))
	}
	// The first source that answered leads: its size is the file's.
	for i, s := range r.sources {
		if s == live[0] {
			r.sources[0], r.sources[i] = r.sources[i], r.sources[0]
			break
		}
	}
	return nil
}

// roomFor refuses a file the disk cannot hold (what a part file from an
// earlier run holds already counts as room), before any byte or tree is
// fetched: a server claiming an absurd size gets nothing allocated.
func (r *run) roomFor(size int64) error {
	free := freeBytes(filepath.Dir(r.cfg.Path))
	if free < 0 {
		return nil
	}
	have := int64(0)
	if r.cfg.Resume {
		have = allocated(r.cfg.Path + ".part")
	}
	need := size + integrity.OutboardSize(size) - have
	if need > free {
		return fmt.Errorf("%w: %s needs %d bytes (the file and its tree) and its file system has %d free", ErrLocal, r.cfg.Path, need, free)
	}
	return nil
}

// awaitDigest asks the lead source again, for up to a minute, when it
// sent no Repr-Digest but links a tree: a server that makes trees (the
// engine) sends the digest once it has hashed the file, which its first
// request for the file started.
func (r *run) awaitDigest(ctx context.Context) error {
	lead := r.sources[0]
	if r.cfg.Digest != nil || lead.digest != nil || !lead.linked {
		return nil
	}
	c := r.cfg.NewClient()
	defer c.CloseIdleConnections()
	for deadline := time.Now().Add(time.Minute); lead.digest == nil && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(250 * time.Millisecond):
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Stall)
		err := lead.probe(pctx, c)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrNetwork, lead.URL, err)
		}
	}
	return nil
}

// trust decides the root digest: the caller's, or the server's.
func (r *run) trust(res *Result) (integrity.Digest, error) {
	var root integrity.Digest
	switch {
	case r.cfg.Digest != nil:
		root, res.Trusted = *r.cfg.Digest, r.cfg.DigestFrom
	case r.sources[0].digest != nil:
		root = *r.sources[0].digest
		res.Trusted = "Repr-Digest of " + r.sources[0].host() + " (integrity in transit, not authenticity: it came from the server that sends the bytes)"
	default:
		return root, fmt.Errorf("%w: no digest to check against: %s sent no Repr-Digest; pass --digest or --manifest", ErrUnverified, r.sources[0].URL)
	}
	for _, s := range r.sources {
		if s.digest != nil && *s.digest != root && s.dropped == "" {
			s.drop(fmt.Sprintf("serves another version (blake3 %s, want %s)", s.digest, root))
		}
	}
	if r.live() == 0 {
		return root, fmt.Errorf("%w: every source serves another version than blake3 %s", ErrUnverified, root)
	}
	return root, nil
}

// loadTree takes the tree kept by an earlier run, or fetches one from
// the first source whose tree hashes to root.
func (r *run) loadTree(ctx context.Context, root integrity.Digest, size int64, res *Result) error {
	if t := integrity.OutboardSize(size); t > maxTree {
		return fmt.Errorf("%w: a %d-byte file has a %d-byte tree, more than the %d this client holds in memory (files up to %d bytes)",
			ErrLocal, size, t, int64(maxTree), int64(maxTree/64*integrity.GroupSize))
	}
	cached := r.cfg.Path + ".part.obao"
	if r.cfg.Resume {
		if b, err := readNoFollow(cached, integrity.OutboardSize(size)); err == nil {
			if o, err := integrity.ParseOutboard(b, root, size); err == nil {
				r.tree = o
				return nil
			}
		}
	}
	var why []string
	for _, s := range r.sources {
		if s.dropped != "" {
			continue
		}
		b, err := r.fetchTree(ctx, s, size)
		res.TreeBytes += int64(len(b))
		if err == nil {
			var o *integrity.Outboard
			if o, err = integrity.ParseOutboard(b, root, size); err == nil {
				r.tree = o
				if err := writeFileSync(cached, b); err != nil {
					return fmt.Errorf("%w: %v", ErrLocal, err)
				}
				return nil
			}
		}
		why = append(why, s.treeURL+": "+err.Error())
	}
	return fmt.Errorf("%w: no outboard tree matches blake3 %s (%s); serve the file with engine, or write trees beside it with engine digest --outboard",
		ErrUnverified, root, strings.Join(why, "; "))
}

// maxTree bounds the tree a download holds in memory: 512 MiB, the tree
// of a 2 TiB file.
const maxTree = 512 << 20

// fetchTree gets s's tree, waiting out 503s (the engine answers 503 with
// Retry-After until it has hashed the file) up to a minute.
func (r *run) fetchTree(ctx context.Context, s *Source, size int64) ([]byte, error) {
	c := r.cfg.NewClient()
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	for {
		tctx, cancel := context.WithTimeout(ctx, r.cfg.Stall)
		b, err := s.fetchTree(tctx, c, integrity.OutboardSize(size))
		cancel()
		var se *statusError
		if !errors.As(err, &se) || se.code != 503 || time.Now().After(deadline) {
			return b, err
		}
		wait := time.Second
		if n, err := strconv.Atoi(se.retryAfter); err == nil && n > 0 {
			wait = min(time.Duration(n)*time.Second, 5*time.Second)
		}
		r.log.Info("the tree is not ready (503); waiting", "url", s.treeURL, "retry_after", wait)
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(wait):
		}
	}
}

// openPart opens PATH.part (continuing it with Resume) and its state:
// groups recorded are trusted, groups not recorded are checked again
// from the part file.
func (r *run) openPart(res *Result) error {
	path := r.cfg.Path + ".part"
	want := newState(r.tree.Size(), r.tree.Root(), r.tree.GroupSize(), r.tree.Groups())
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL | noFollow | regularOnly
	if r.cfg.Resume {
		flags = os.O_RDWR | os.O_CREATE | noFollow | regularOnly
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s exists (an earlier download): --resume continues it; remove it to start again", ErrLocal, path)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if err := lockPart(f); err != nil {
		f.Close()
		return fmt.Errorf("%w: %s is being written by another engine fetch (%v)", ErrLocal, path, err)
	}
	if err := ownPart(f); err != nil {
		f.Close()
		return fmt.Errorf("%w: %s cannot be continued: %v; remove it to start again", ErrLocal, path, err)
	}
	r.part = f
	st, err := loadState(path+".state", want)
	switch {
	case err == nil:
		res.Resumed = st.count()
	case errors.Is(err, os.ErrNotExist):
		st = want
	default:
		r.log.Warn("starting over: the state file is not for this file", "err", err)
		st = want
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("%w: %v", ErrLocal, err)
		}
	}
	r.st = st
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	resumable := r.cfg.Resume && fi.Size() == r.tree.Size()
	if err := f.Truncate(r.tree.Size()); err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	buf := make([]byte, r.tree.GroupSize())
	for i := range r.tree.Groups() {
		_, n := r.tree.Group(i)
		switch {
		case st.has(i):
			r.recorded = append(r.recorded, i)
		case resumable && recheck(f, r.tree, i, buf[:n]):
			st.set(i)
			res.Rechecked++
		default:
			continue
		}
		r.done++
		r.doneB += n
	}
	return nil
}

// recheck reads group i from the part file and checks it; a group in a
// hole was never written.
func recheck(f *os.File, o *integrity.Outboard, i int64, buf []byte) bool {
	off, n := o.Group(i)
	if hole(f, off, n) {
		return false
	}
	if _, err := f.ReadAt(buf, off); err != nil {
		return false
	}
	return o.Verify(i, buf) == nil
}

// plan queues the groups not yet done, in spans of a few MiB: small
// enough that every connection has several, large enough that a request
// is mostly body.
func (r *run) plan() {
	r.queue, r.retries = r.queue[:0], r.retries[:0]
	left := r.tree.Groups() - r.done
	per := max(1, min(32, left/int64(r.cfg.Connections*4)))
	for i := int64(0); i < r.tree.Groups(); {
		if r.st.has(i) {
			i++
			continue
		}
		j := i
		for j+1 < r.tree.Groups() && j+1-i < per && !r.st.has(j+1) {
			j++
		}
		r.queue = append(r.queue, span{first: i, last: j})
		i = j + 1
	}
}

// take hands a worker serving s its next span; false when there is no
// more work (every group done, or the download failed).
func (r *run) take(s *Source) (span, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.failed != nil || r.done == r.tree.Groups() {
			return span{}, false
		}
		others := r.liveLocked() > 1
		for i, sp := range r.retries {
			if sp.avoid != s || !others {
				r.retries = append(r.retries[:i], r.retries[i+1:]...)
				r.inflight++
				return sp, true
			}
		}
		if len(r.queue) > 0 {
			sp := r.queue[0]
			r.queue = r.queue[1:]
			r.inflight++
			return sp, true
		}
		if r.inflight == 0 && len(r.retries) == 0 {
			return span{}, false // nothing queued and nothing that could queue more
		}
		r.cond.Wait()
	}
}

// requeue gives back the groups of sp from first on, unfetched.
func (r *run) requeueLocked(sp span, first int64) {
	if first <= sp.last {
		r.queue = append([]span{{first: first, last: sp.last, avoid: sp.avoid}}, r.queue...)
	}
}

// worker fetches spans until there are none, on its own connection to
// each source it uses.
func (r *run) worker(ctx context.Context, i int) {
	clients := map[*Source]*http.Client{}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	buf := make([]byte, r.tree.GroupSize())
	netFails := 0
	for {
		s := r.pick(i)
		if s == nil {
			r.mu.Lock()
			all := r.done == r.tree.Groups()
			r.mu.Unlock()
			if !all {
				r.fail(r.noSourcesLeft())
			}
			return
		}
		sp, ok := r.take(s)
		if !ok {
			return
		}
		c := clients[s]
		if c == nil {
			c = r.cfg.NewClient()
			clients[s] = c
		}
		next, err := r.fetchSpan(ctx, s, c, sp, buf)
		r.mu.Lock()
		r.inflight--
		if err != nil && r.failed == nil {
			r.requeueLocked(sp, next)
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err == nil {
			netFails = 0
			s.mu.Lock()
			s.netFails = 0
			s.mu.Unlock()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, integrity.ErrGroupMismatch) {
			continue // the group is queued for another source: nothing to wait for
		}
		netFails++
		r.log.Debug("range failed", "source", s.URL, "groups", fmt.Sprintf("%d-%d", sp.first, sp.last), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(50*time.Millisecond<<min(netFails, 6), 2*time.Second)):
		}
	}
}

// pick is the source worker i uses: its own by number, or the next one
// still serving.
func (r *run) pick(i int) *Source {
	for k := range r.sources {
		s := r.sources[(i+k)%len(r.sources)]
		s.mu.Lock()
		ok := s.dropped == ""
		s.mu.Unlock()
		if ok {
			return s
		}
	}
	return nil
}

// fetchSpan fetches sp from s and writes each group that passes its
// check. It returns the first group not written, and why it stopped
// early.
func (r *run) fetchSpan(ctx context.Context, s *Source, c *http.Client, sp span, buf []byte) (int64, error) {
	off, _ := r.tree.Group(sp.first)
	endOff, endN := r.tree.Group(sp.last)
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(r.cfg.Stall, func() { cancel(fmt.Errorf("stalled: nothing for %v", r.cfg.Stall)) })
	defer stall.Stop()
	start := time.Now()
	body, err := s.openRange(rctx, c, off, endOff+endN-off)
	if err != nil {
		if cause := context.Cause(rctx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		r.sourceFailed(s, err)
		return sp.first, err
	}
	defer body.Close()
	for g := sp.first; g <= sp.last; g++ {
		gOff, n := r.tree.Group(g)
		// The stall clock restarts per group, not per byte: a source
		// that trickles (a byte a second) cannot hold a group for ever.
		got, err := readFull(body, buf[:n], func() {})
		stall.Reset(r.cfg.Stall)
		s.received(int64(got), time.Since(start))
		start = time.Now()
		r.mu.Lock()
		r.fetched += int64(got)
		r.mu.Unlock()
		if err != nil {
			if cause := context.Cause(rctx); cause != nil && ctx.Err() == nil {
				err = cause
			} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("%w: %d of %d bytes of group %d", ErrShortBody, got, n, g)
			}
			r.sourceFailed(s, err)
			return g, err
		}
		if err := r.tree.Verify(g, buf[:n]); err != nil {
			r.wrongGroup(s, g, gOff, n)
			r.mu.Lock()
			if r.failed == nil {
				r.retries = append(r.retries, span{first: g, last: g, avoid: s})
			}
			r.mu.Unlock()
			return g + 1, err
		}
		if _, err := r.part.WriteAt(buf[:n], gOff); err != nil {
			r.fail(fmt.Errorf("%w: writing %s.part: %v", ErrLocal, r.cfg.Path, err))
			return g, err
		}
		r.mu.Lock()
		r.st.set(g)
		r.done++
		r.doneB += n
		r.written += n
		r.mu.Unlock()
	}
	startWriteback(r.part, off, endOff+endN-off)
	return sp.last + 1, nil
}

// readFull reads len(buf) bytes, calling progress after each read that
// brought some.
func readFull(r io.Reader, buf []byte, progress func()) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if m > 0 {
			progress()
		}
		if err != nil {
			if n == len(buf) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

// wrongGroup counts a group s sent wrong, and drops s past the bound;
// a group that failed too often ends the download.
func (r *run) wrongGroup(s *Source, g, off, n int64) {
	s.mu.Lock()
	s.wrong++
	s.failures++
	wrong := s.wrong
	if wrong >= r.cfg.BadGroups && s.dropped == "" {
		s.dropped = fmt.Sprintf("sent wrong bytes for %d groups, the last bytes %d-%d", wrong, off, off+n-1)
	}
	dropped := s.dropped
	s.mu.Unlock()
	r.log.Warn("bytes failed their check; fetching them again", "source", s.URL, "group", g, "bytes", fmt.Sprintf("%d-%d", off, off+n-1))
	if dropped != "" && wrong == r.cfg.BadGroups {
		r.log.Warn("source dropped", "source", s.URL, "why", dropped)
	}
	r.mu.Lock()
	r.retried++
	r.attempts[g]++
	tries := r.attempts[g]
	r.mu.Unlock()
	if tries >= r.cfg.Attempts {
		r.fail(fmt.Errorf("%w: bytes %d-%d (group %d) failed their check %d times; last from %s", ErrUnverified, off, off+n-1, g, tries, s.URL))
	}
}

// sourceFailed counts a failed request: a source that broke the range
// protocol is dropped at once, one that fails five times in a row too.
func (r *run) sourceFailed(s *Source, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	s.netFails++
	if s.dropped != "" {
		return
	}
	switch {
	case errors.Is(err, ErrNotPartial), errors.Is(err, ErrContentRange), errors.Is(err, ErrLength):
		s.dropped = err.Error()
	case s.netFails >= 5:
		s.dropped = fmt.Sprintf("failed %d times in a row, last: %v", s.netFails, err)
	default:
		return
	}
	r.log.Warn("source dropped", "source", s.URL, "why", s.dropped)
}

func (s *Source) drop(why string) {
	s.mu.Lock()
	if s.dropped == "" {
		s.dropped = why
	}
	s.mu.Unlock()
}

func (s *Source) received(n int64, d time.Duration) {
	s.mu.Lock()
	s.bytes += n
	s.nanos += int64(d)
	s.mu.Unlock()
}

func (r *run) live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.liveLocked()
}

func (r *run) liveLocked() int {
	n := 0
	for _, s := range r.sources {
		s.mu.Lock()
		if s.dropped == "" {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// noSourcesLeft says why no source serves any more: wrong bytes make it
// a verification failure, anything else a network one.
func (r *run) noSourcesLeft() error {
	kind := ErrNetwork
	var why []string
	for _, s := range r.sources {
		s.mu.Lock()
		if s.wrong > 0 {
			kind = ErrUnverified
		}
		why = append(why, s.URL+": "+s.dropped)
		s.mu.Unlock()
	}
	return fmt.Errorf("%w: every source was dropped: %s", kind, strings.Join(why, "; "))
}

// fail ends the download with err (the first one wins).
func (r *run) fail(err error) {
	r.mu.Lock()
	if r.failed == nil {
		r.failed = err
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	r.cancel(err)
}

// checkpointEvery is the longest a checked group waits to be recorded:
// what a kill can cost beyond the groups in flight is the groups of this
// long, checked again (not fetched again) from the part file on resume.
const checkpointEvery = 500 * time.Millisecond

// checkpoints records progress every checkpointEvery until stop, and
// reports it ten times a second.
func (r *run) checkpoints(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if r.cfg.Progress != nil {
			r.mu.Lock()
			p := Progress{Bytes: r.doneB, Size: r.tree.Size(), Done: r.done, Groups: r.tree.Groups()}
			r.mu.Unlock()
			p.Sources = r.live()
			r.cfg.Progress(p)
		}
		if i%int(checkpointEvery/(100*time.Millisecond)) == 0 {
			if err := r.checkpoint(); err != nil {
				r.fail(fmt.Errorf("%w: recording progress: %v", ErrLocal, err))
			}
		}
	}
}

// checkpoint flushes the part file, then records the groups it holds:
// a group is in the state file only once its bytes are on disk.
func (r *run) checkpoint() error {
	r.mu.Lock()
	done := append([]byte(nil), r.st.done...)
	r.mu.Unlock()
	if err := r.part.Sync(); err != nil {
		return err
	}
	return r.st.save(r.cfg.Path+".part.state", done)
}

// finish checks the tree against the root once more, then puts the file
// in place: flushed, renamed, its directory flushed, the state removed.
func (r *run) finish(res *Result) error {
	if _, err := integrity.ParseOutboard(treeBytes(r.cfg.Path+".part.obao"), r.tree.Root(), r.tree.Size()); err != nil {
		return fmt.Errorf("%w: the tree no longer hashes to the digest: %v", ErrUnverified, err)
	}
	if r.cfg.SHA256 != nil {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(r.part, 0, r.tree.Size())); err != nil {
			return fmt.Errorf("%w: reading %s.part for its SHA-256: %v", ErrLocal, r.cfg.Path, err)
		}
		var got integrity.SHA256
		h.Sum(got[:0])
		res.SHA256 = got.String()
		if got != *r.cfg.SHA256 {
			return fmt.Errorf("%w: SHA-256 %s, want %s (every BLAKE3 group checked: the SHA-256 given describes other bytes than the BLAKE3 digest)", ErrUnverified, got, r.cfg.SHA256)
		}
	}
	if err := r.part.Sync(); err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if err := os.Rename(r.cfg.Path+".part", r.cfg.Path); err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if d, err := os.Open(filepath.Dir(r.cfg.Path)); err == nil {
		d.Sync()
		d.Close()
	}
	os.Remove(r.cfg.Path + ".part.state")
	os.Remove(r.cfg.Path + ".part.obao")
	res.Verified = true
	return nil
}

func treeBytes(path string) []byte {
	b, _ := readNoFollow(path, 1<<40)
	return b
}

// report fills in the counts of res.
func (r *run) report(res *Result) {
	r.mu.Lock()
	res.Fetched, res.Refetched, res.Retried = r.fetched, r.fetched-r.written, r.retried
	written := r.written
	r.mu.Unlock()
	res.Seconds = time.Since(r.started).Seconds()
	if res.Seconds > 0 {
		res.MiBps = float64(written) / (1 << 20) / res.Seconds
	}
	for _, s := range r.sources {
		s.mu.Lock()
		sr := SourceReport{URL: s.URL, Bytes: s.bytes, WrongGroups: s.wrong, Failures: s.failures, Dropped: s.dropped}
		if s.nanos > 0 {
			sr.MiBps = float64(s.bytes) / (1 << 20) / (float64(s.nanos) / 1e9)
		}
		s.mu.Unlock()
		res.Sources = append(res.Sources, sr)
	}
}

// writeFileSync writes b to path whole: a temporary file in its
// directory, flushed, renamed over path (so a symbolic link planted at
// path is replaced, never followed).
func writeFileSync(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// readNoFollow reads a file of at most max bytes, refusing a symbolic
// link at path.
func readNoFollow(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow|regularOnly, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s: longer than %d bytes", path, max)
	}
	return b, err
}
