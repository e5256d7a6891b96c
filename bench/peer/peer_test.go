package peer

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediaship/engine/bench"
)

// TestStartEngine: the engine built from this tree starts, names its
// listener and admin addresses, answers, and stops within StopTimeout.
func TestStartEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the engine")
	}
	bin := filepath.Join(t.TempDir(), "engine")
	if _, err := bench.BuildEngine("../..", bin); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.txt"), []byte("a"), 0o644)
	cfg := filepath.Join(t.TempDir(), "engine.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen = \"127.0.0.1:0\"\nroot = %q\n[admin]\nlisten = \"127.0.0.1:0\"\n", root)), 0o644)
	e, err := StartEngine(bin, cfg, -1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	for _, u := range []string{"http://" + e.Addr + "/a.txt", "http://" + e.Admin + "/healthz"} {
		resp, err := http.Get(u)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v\n%s", u, resp, err, e.Log())
		}
		resp.Body.Close()
	}
	e.Stop()
	if e.Cmd.ProcessState == nil {
		t.Error("Stop returned before the process ended")
	}
}
