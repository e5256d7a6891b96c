package precompress

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"strings"

	"github.com/mediaship/engine/engine/files"
)

// Config tunes Run and Check. The zero value of each field means its
// default.
type Config struct {
	// Codings are the sidecars written (or checked). Nil means all of
	// files.Codings: br, zstd and gzip. A run never touches sidecars of
	// codings it was not given.
	Codings []files.Coding
	// MinSize is the size below which a file gets no sidecar. Zero means
	// 1 KiB (DefaultMinSize); negative means no floor.
	MinSize int64
	// MinSaving is the part of a file's size, in percent (below 100),
	// that a sidecar must save to be kept. Zero means 5
	// (DefaultMinSaving); negative means any saving, even of one byte.
	MinSaving float64
	// Workers is the number of compressions run at once (one per file
	// and coding). Zero means one per CPU.
	Workers int
	// DryRun reports what would be written and removed, and writes and
	// removes nothing.
	DryRun bool
	// Progress, when set, is called after each compression, from any
	// worker.
	Progress func(Progress)

	// midway lets tests act (change the file, cancel) once a
	// compression has read part of its file.
	midway func(path string)
}

// Defaults of Config.
const (
	DefaultMinSize   = 1 << 10
	DefaultMinSaving = 5.0
)

func (c Config) withDefaults() (Config, error) {
	if c.Codings == nil {
		c.Codings = files.Codings[:]
	}
	for _, cd := range c.Codings {
		if newEncoderFunc(cd) == nil {
			return c, fmt.Errorf("precompress: unknown coding %q", cd.Name)
		}
	}
	switch {
	case c.MinSize == 0:
		c.MinSize = DefaultMinSize
	case c.MinSize < 0:
		c.MinSize = 0
	}
	switch {
	case c.MinSaving == 0:
		c.MinSaving = DefaultMinSaving
	case c.MinSaving < 0:
		c.MinSaving = 0
	case c.MinSaving >= 100:
		return c, fmt.Errorf("precompress: a saving of %g%% is impossible (the limit is below 100)", c.MinSaving)
	}
	if c.Workers <= 0 {
		c.Workers = runtime.NumCPU()
	}
	return c, nil
}

// ParseCodings reads a comma-separated list of codings: "br,zstd,gzip"
// (also "zst" and "gz").
func ParseCodings(s string) ([]files.Coding, error) {
	var out []files.Coding
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		found := false
		for _, cd := range files.Codings {
			if name == cd.Name || name == cd.Suffix[1:] {
				if !containsCoding(out, cd) {
					out = append(out, cd)
				}
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("precompress: unknown coding %q (known: br, zstd, gzip)", name)
		}
	}
	return out, nil
}

func containsCoding(list []files.Coding, c files.Coding) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}

// Compressible reports whether a file of this name gets sidecars: text
// (text/*: HTML, CSS, JavaScript, CSV, TSV, Markdown, plain text), JSON
// and XML and their +json and +xml kinds (SVG, source maps, web
// manifests, feeds, DASH manifests), HLS playlists, WebAssembly, YAML,
// TOML, PEM, and the uncompressed binary formats ICO, BMP, TrueType and
// OpenType fonts. Not: images, audio and video (already compressed),
// WOFF fonts, PDF, archives and compressed files (zip, gz, xz, zst, 7z;
// tar and disk images, which are downloaded as they are), model weights
// and anything else served as application/octet-stream, and sidecars
// themselves. Types come from files.ContentType, the server's table.
func Compressible(name string) bool {
	name = path.Base(name)
	if _, ok := files.SidecarOf(name); ok {
		return false
	}
	t, _, _ := strings.Cut(files.ContentType(name), ";")
	switch {
	case strings.HasPrefix(t, "text/"), strings.HasSuffix(t, "+json"), strings.HasSuffix(t, "+xml"):
		return true
	}
	switch t {
	case "application/json", "application/xml", "application/wasm", "application/yaml", "application/toml",
		"application/vnd.apple.mpegurl", "application/x-pem-file",
		"image/vnd.microsoft.icon", "image/bmp", "font/ttf", "font/otf":
		return true
	}
	return false
}

// Progress is a snapshot of a run: files whose every coding is done, and
// bytes of files compressed (a file counts once per coding).
type Progress struct {
	Files, TotalFiles int
	Bytes, TotalBytes int64
}

// FileError is one file that could not be compressed or checked.
type FileError struct {
	Path string // beneath the root as given
	Err  error
}

func (e FileError) Error() string {
	err := e.Err
	if pe, ok := err.(*fs.PathError); ok { // the path is already said
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return e.Path + ": " + err.Error()
}

func (e FileError) Unwrap() error { return e.Err }

// Named problems with files while they are compressed.
var (
	ErrChanged = errors.New("precompress: changed while being compressed")
	errNoGain  = errors.New("precompress: saving below the minimum")
)
