// Package edgecache keeps an edge cache's objects on disk: one directory,
// each object a data file and a metadata file, bounded by a size and by
// the free space of its file system (least recently used first out).
//
// An object is filled once (Begin gives every caller for a key the same
// Fill; the first is its leader): the leader appends the origin's bytes,
// readers read what has landed while it is written, and Commit makes it
// complete only after its bytes matched the digests the origin stated.
//
// It does not speak HTTP: what an object's metadata holds (status, fields,
// freshness) is the caller's, kept and given back as is.
//
// The invariant: an object is complete, and Lookup returns it, only when
// its metadata file names its data file, and the metadata is renamed into
// place last (after the data, both written and synced). A crash at any
// moment leaves either the old object, the new one, or none, never a
// partial one: Open removes every file no metadata names.
package edgecache
