package vmtest

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestLoadOrder(t *testing.T) {
	byName := map[string]*module{
		"tls":           {name: "tls", path: "/m/tls.ko"},
		"gcm":           {name: "gcm", path: "/m/gcm.ko", depends: []string{"ghash_generic"}},
		"ghash_generic": {name: "ghash_generic", path: "/m/ghash-generic.ko", depends: []string{"gf128mul"}},
		"gf128mul":      {name: "gf128mul", path: "/m/gf128mul.ko"},
		"needs_tls":     {name: "needs_tls", path: "/m/needs_tls.ko", depends: []string{"tls"}},
	}
	order, err := loadOrder(byName, []string{"gcm", "tls", "needs-tls"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range order {
		names = append(names, m.name)
	}
	want := "gf128mul ghash_generic gcm tls needs_tls"
	if got := join(names); got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	order, _ = loadOrder(byName, []string{"gcm", "tls", "needs_tls"}, []string{"tls"})
	names = nil
	for _, m := range order {
		names = append(names, m.name)
	}
	if got := join(names); got != "gf128mul ghash_generic gcm" {
		t.Errorf("omitting tls (and what needs it): %q", got)
	}
	if _, err := loadOrder(byName, []string{"nope"}, nil); err == nil {
		t.Error("unknown module accepted")
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	return b.String()
}

// TestInitramfs reads the archive back as the kernel would: newc headers,
// names, modes, device numbers and contents.
func TestInitramfs(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "tls.ko")
	os.WriteFile(mod, []byte("MODULE"), 0o644)
	out := filepath.Join(dir, "initramfs.cpio.gz")
	if err := writeInitramfs(out, []byte("INIT"), []*module{{name: "tls", path: mod, aliases: []string{"tcp-ulp-tls"}}}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(out)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	type entry struct {
		mode       uint64
		rmaj, rmin uint64
		data       string
	}
	got := map[string]entry{}
	for len(raw) > 0 {
		if len(raw) < 110 || string(raw[:6]) != "070701" {
			t.Fatalf("bad header at %q", raw[:min(len(raw), 16)])
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(string(raw[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mode, size, rmaj, rmin, nameLen := field(1), field(6), field(9), field(10), field(11)
		name := string(raw[110 : 110+nameLen-1])
		off := (110 + int(nameLen) + 3) &^ 3
		data := string(raw[off : off+int(size)])
		got[name] = entry{mode, rmaj, rmin, data}
		raw = raw[(off+int(size)+3)&^3:]
		if name == "TRAILER!!!" {
			break
		}
	}
	checks := map[string]entry{
		"init":                  {0o100755, 0, 0, "INIT"},
		"sbin/modprobe":         {0o120777, 0, 0, "/init"},
		"dev/console":           {0o020600, 5, 1, ""},
		"modules/tls.ko":        {0o100644, 0, 0, "MODULE"},
		"modules/load.list":     {0o100644, 0, 0, "tls.ko\n"},
		"modules/modules.alias": {0o100644, 0, 0, "tls tls.ko\ntcp-ulp-tls tls.ko\n"},
	}
	for name, want := range checks {
		if got[name] != want {
			t.Errorf("%s = %+v, want %+v", name, got[name], want)
		}
	}
}
