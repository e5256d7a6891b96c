package precompress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/mediaship/engine/engine/files"
)

// newEncoderFunc returns how to make the encoder of a coding, or nil for
// a coding it does not know.
func newEncoderFunc(c files.Coding) func(io.Writer) (io.WriteCloser, error) {
	switch c.Name {
	case "br":
		return func(w io.Writer) (io.WriteCloser, error) {
			return brotli.NewWriterLevel(w, brotli.BestCompression), nil
		}
	case "zstd":
		// RFC 9659 §3: a zstd Content-Encoding uses a window of at most
		// 8 MiB, which browsers enforce. One goroutine per encoder: the
		// run already compresses Workers files at once.
		return func(w io.Writer) (io.WriteCloser, error) {
			return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(19)),
				zstd.WithWindowSize(8<<20), zstd.WithEncoderConcurrency(1))
		}
	case "gzip":
		return func(w io.Writer) (io.WriteCloser, error) {
			return gzip.NewWriterLevel(w, gzip.BestCompression)
		}
	}
	return nil
}

// capWriter counts what it passes on and fails once more than max bytes
// went through: a sidecar that cannot save enough is abandoned as soon
// as that is certain, not after the whole file.
type capWriter struct {
	w   io.Writer
	n   int64
	max int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if c.n > c.max {
		return 0, errNoGain
	}
	return c.w.Write(p)
}

// limit is the largest sidecar worth keeping for a file of size bytes:
// minSaving percent smaller, and at least a byte smaller.
func limit(size int64, minSaving float64) int64 {
	l := int64(float64(size) * (100 - minSaving) / 100)
	return min(l, size-1)
}

// compress writes the sidecar side of src in coding c, through a
// temporary file in side's directory renamed over side once complete,
// with src's permission bits, owner (where allowed) and modification
// time. It returns the sidecar's size, errNoGain when it would not save
// minSaving percent, ErrChanged when src changed meanwhile. On any error
// side is left as it was and the temporary is gone.
func compress(ctx context.Context, src, side string, c files.Coding, minSaving float64, midway func(string)) (n int64, err error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	before, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if !before.Mode().IsRegular() {
		return 0, fmt.Errorf("precompress: not a regular file")
	}
	tmp, err := os.CreateTemp(filepath.Dir(side), tempPrefix+"*"+tempSuffix)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return 0, fmt.Errorf("cannot create a temporary file in %s: %w", filepath.Dir(side), err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 64<<10)
	cw := &capWriter{w: bw, max: limit(before.Size(), minSaving)}
	enc, err := newEncoderFunc(c)(cw)
	if err != nil {
		return 0, err
	}
	if err := copyCtx(ctx, enc, in, midway, src); err != nil {
		enc.Close()
		return 0, err
	}
	if err := enc.Close(); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	after, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		return 0, ErrChanged
	}
	if err := tmp.Chmod(before.Mode().Perm()); err != nil {
		return 0, err
	}
	chown(tmp, before)
	// Data on disk before the name: after a crash the sidecar is either
	// the old one or the whole new one, never a hole.
	if err := tmp.Sync(); err != nil {
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	// The file's mtime, set before the rename so the sidecar never
	// appears with another.
	if err := os.Chtimes(tmp.Name(), time.Time{}, before.ModTime()); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), side); err != nil {
		return 0, err
	}
	return cw.n, nil
}

// copyCtx copies src into dst, stopping when ctx is done.
func copyCtx(ctx context.Context, dst io.Writer, src io.Reader, midway func(string), name string) error {
	buf := make([]byte, 256<<10)
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if first && midway != nil {
			midway(name)
		}
		if errors.Is(err, io.EOF) {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
	}
}
