// Command engine is the one binary: serve, preflight, digest, precompress,
// verify, bench and version (usage: engine help). It parses flags and
// wires the packages together; the work is done in engine, preflight,
// integrity, precompress and bench, and nothing here serves, probes,
// hashes or compresses by itself.
//
// Invariant: the commands that check something (preflight, digest
// --check, precompress --check, verify, bench) exit 0 only when everything
// checked passed, 1 when a check failed, and 2 when they could not check
// at all (bad flags, an unreadable manifest): a 0 never hides a failure.
package main
