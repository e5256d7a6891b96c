// Package digests knows the BLAKE3 digest of every served file: from the
// digest cache (by file identity, persisted when configured), from a
// site's manifest, or by hashing in the background on a bounded pool of
// workers. Serving never waits for it; a file whose digest is unknown is
// queued once, however many requests ask.
//
// It imports nothing of the engine's.
package digests
