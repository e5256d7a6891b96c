// Package integrity computes and checks BLAKE3 digests of files: a
// streaming file hasher, HashTree for a whole directory on several
// workers, a digest cache keyed by file identity that can be persisted
// across restarts, manifests in the b3sum tool's format, digest header
// values (RFC 9530), and a verifying reader that counts and hashes a body
// as it streams.
//
// It never holds a whole file in memory: hashing reads in large chunks.
//
// Invariant: a digest is only ever attached to the file identity (device,
// inode, size, modification time) it was computed from; a file that
// changed while being hashed gets no digest.
package integrity
