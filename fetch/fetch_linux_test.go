package fetch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaship/engine/integrity"
)

// TestFetchAdoptsNothing: --resume does not continue a part file it must
// not adopt (a hard link to another file), and a FIFO planted at the
// state or tree file neither blocks it nor is taken for one.
func TestFetchAdoptsNothing(t *testing.T) {
	f := newFile(t, 4*integrity.GroupSize, 11)
	u := serve(t, origin(f)) + "/f.bin"
	dir := t.TempDir()
	out := filepath.Join(dir, "out.bin")
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("keep me"), 0o644)
	if err := os.Link(other, out+".part"); err != nil {
		t.Fatal(err)
	}
	if _, err := runFetch(t, Config{URL: u, Path: out, Resume: true}); !errors.Is(err, ErrLocal) || !strings.Contains(err.Error(), "hard link") {
		t.Errorf("a hard link at the part file: %v, want it refused", err)
	}
	if b, _ := os.ReadFile(other); string(b) != "keep me" {
		t.Errorf("the file linked at the part file was written: %d bytes", len(b))
	}
	for _, side := range []string{".part", ".part.state", ".part.obao"} {
		os.Remove(out + side)
	}
	for _, side := range []string{".part.state", ".part.obao"} {
		if err := syscall.Mkfifo(out+side, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := runFetch(t, Config{URL: u, Path: out, Resume: true})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("with FIFOs at the side files: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a FIFO at a side file blocked the fetch")
	}
	checkOut(t, out, f)
}
