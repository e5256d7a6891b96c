// Package files is the protocol-neutral file layer: it maps request paths
// to files beneath a site root without letting them escape it, keeps an
// open-file cache that the kernel (inotify) invalidates when a file
// changes, and turns a request's method, path and headers into a Response
// plan: status, headers, and body parts that are ranges of an open file or
// small byte slices. HTTP/1.1, HTTP/2 and HTTP/3 all serialize that plan.
//
// It does no network I/O. Opening files may block, so Cache.Lookup never
// opens: it answers from memory or reports a miss, and Cache.Open (called
// off the reactor, on a worker pool) does the blocking work.
//
// Invariant: every *Entry handed out holds a reference; the caller must
// Release it once the response that uses its descriptor is finished.
package files
