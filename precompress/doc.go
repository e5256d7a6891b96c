// Package precompress writes the sidecars the file server sends to
// clients that accept them: file.br (brotli quality 11), file.zst (zstd,
// the encoder's best level, an 8 MiB window) and file.gz (gzip level 9)
// beside each compressible file of a tree, and checks a tree for stale
// and orphaned ones. What is compressible is decided by the server's
// content-type table (engine/files), so the two never disagree.
//
// It does not serve, and it never compresses a sidecar, a dotfile, a file
// beneath a dot directory or a file reached through a symbolic link that
// leaves the tree or leads to a hidden path.
//
// Invariant: a sidecar appears only whole, by rename from a temporary in
// its directory, and carries its file's modification time exactly; the
// server serves no sidecar older than its file, and "sidecar mtime ==
// file mtime" is how a later run knows it is up to date.
package precompress
