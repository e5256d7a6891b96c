// Package fetch downloads one file over several connections and sources
// (a URL and its mirrors), checking every 256 KiB chunk group against the
// file's BLAKE3 outboard tree as it lands, before it is written: the
// client half of the engine's verified downloads (engine fetch).
//
// It writes verified groups in place into PATH.part with pwrite, records
// them in PATH.part.state (after the part file is flushed to disk, at
// bounded intervals), re-fetches a group that fails its check from another
// source, drops a source that keeps sending wrong bytes, answers a range
// with the whole file, a wrong Content-Range or a short body, or stalls,
// and renames the file into place only when every group checked. It
// resumes after a kill at any point: recorded groups are trusted, the rest
// are checked again from the part file or fetched again, never assumed.
//
// It does not choose the digest it trusts: the caller passes the root
// digest (from the command line or a manifest) or lets it take the
// server's Repr-Digest, and the result says which.
//
// Invariant: no byte reaches the part file before the group holding it
// has been checked against the tree, and the tree against the root.
package fetch
