// Package fileio reads files by descriptor without owning them: the
// positional reads that the TLS record layer, the HTTP/2 and HTTP/3
// writers and the digest worker use to fill their buffers straight from
// the page cache. It never opens, closes or seeks a descriptor; the file
// layer owns them.
//
// Invariant: every file read of the server goes through it, and a file
// that ends before the bytes promised is always ErrShrank, never a short
// read passed on as data.
package fileio
