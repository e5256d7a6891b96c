// Package fileio reads files by descriptor without owning them: the
// positional reads that the TLS record layer and the HTTP/2 writer use to
// fill their buffers straight from the page cache.
package fileio
