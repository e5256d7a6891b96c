package vmtest

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// module is one kernel module file and what its .modinfo says.
type module struct {
	name    string // canonical: dashes become underscores
	path    string
	depends []string
	aliases []string
}

// readModinfo reads a module's .modinfo section. Debian's kernel package
// ships no modules.dep (depmod runs at install), so dependencies and
// aliases come from here.
func readModinfo(path string) (*module, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	m := &module{path: path}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "name":
			m.name = v
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					m.depends = append(m.depends, canon(d))
				}
			}
		case "alias":
			m.aliases = append(m.aliases, v)
		}
	}
	if m.name == "" {
		m.name = strings.TrimSuffix(filepath.Base(path), ".ko")
	}
	m.name = canon(m.name)
	return m, nil
}

func canon(name string) string { return strings.ReplaceAll(name, "-", "_") }

// indexModules reads every module below modDir/kernel.
func indexModules(modDir string) (map[string]*module, error) {
	byName := map[string]*module{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch {
		case strings.HasSuffix(p, ".ko"):
		case strings.HasSuffix(p, ".ko.xz"), strings.HasSuffix(p, ".ko.zst"), strings.HasSuffix(p, ".ko.gz"):
			return fmt.Errorf("compressed module %s: run scripts/fetch-vm-kernel.sh, which decompresses them", p)
		default:
			return nil
		}
		m, err := readModinfo(p)
		if err != nil {
			return err
		}
		byName[m.name] = m
		return nil
	})
	return byName, err
}

// loadOrder returns the wanted modules and their dependencies,
// dependencies first, leaving out omitted modules and all that need them.
func loadOrder(byName map[string]*module, want, omit []string) ([]*module, error) {
	var order []*module
	seen := map[string]bool{}
	var visit func(string) (bool, error)
	// visit returns false when the module (or a dependency) is omitted.
	visit = func(n string) (bool, error) {
		n = canon(n)
		if slices.Contains(omit, n) {
			return false, nil
		}
		if seen[n] {
			return true, nil
		}
		m := byName[n]
		if m == nil {
			return false, fmt.Errorf("module %q not in the kernel package", n)
		}
		for _, d := range m.depends {
			ok, err := visit(d)
			if err != nil || !ok {
				return false, err
			}
		}
		seen[n] = true
		order = append(order, m)
		return true, nil
	}
	for _, n := range want {
		if _, err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// cpio writes the "newc" format the kernel unpacks an initramfs from.
type cpio struct {
	buf   bytes.Buffer
	inode int
}

func (w *cpio) node(name string, mode uint32, data []byte, rmaj, rmin int) {
	w.inode++
	fmt.Fprintf(&w.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.inode, mode, 0, 0, 1, 0, len(data), 0, 0, rmaj, rmin, len(name)+1, 0)
	w.buf.WriteString(name)
	w.buf.WriteByte(0)
	w.pad()
	w.buf.Write(data)
	w.pad()
}

func (w *cpio) pad() {
	for w.buf.Len()%4 != 0 {
		w.buf.WriteByte(0)
	}
}

// hostFile is a file copied from the host into the VM at the same path.
type hostFile struct {
	path string
	data []byte
	mode uint32
}

// binaryFiles returns the programs and the shared libraries ldd lists for
// them (the dynamic loader included).
func binaryFiles(bins []string) ([]hostFile, error) {
	seen := map[string]bool{}
	var out []hostFile
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, hostFile{path: p, data: data, mode: 0o100755})
		return nil
	}
	for _, b := range bins {
		if err := add(b); err != nil {
			return nil, err
		}
		ldd, err := exec.Command("ldd", b).Output()
		if err != nil {
			continue // static
		}
		for _, line := range strings.Split(string(ldd), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				if err := add(f[2]); err != nil {
					return nil, err
				}
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				if err := add(f[0]); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// writeInitramfs builds a gzip'ed cpio with init as /init (also
// /sbin/modprobe, for the kernel's request_module), dev/console, the
// modules with a load list, an alias table and a dependency table, and
// any host files.
func writeInitramfs(out string, init []byte, mods []*module, extra ...hostFile) error {
	w := &cpio{}
	dirs := map[string]bool{}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "sbin", "modules"} {
		w.node(d, 0o040755, nil, 0, 0)
		dirs[d] = true
	}
	for _, f := range extra {
		rel := strings.TrimPrefix(f.path, "/")
		parts := strings.Split(filepath.Dir(rel), "/")
		for i := range parts {
			d := strings.Join(parts[:i+1], "/")
			if d != "." && !dirs[d] {
				dirs[d] = true
				w.node(d, 0o040755, nil, 0, 0)
			}
		}
		w.node(rel, f.mode, f.data, 0, 0)
	}
	// The kernel opens /dev/console for init's standard streams before
	// running it: without this node /init starts with no fds 0-2.
	w.node("dev/console", 0o020600, nil, 5, 1)
	w.node("init", 0o100755, init, 0, 0)
	w.node("sbin/modprobe", 0o120777, []byte("/init"), 0, 0)
	var list, aliases, deps strings.Builder
	file := func(m *module) string { return filepath.Base(m.path) }
	files := map[string]string{} // module name -> file name
	for _, m := range mods {
		files[m.name] = file(m)
	}
	for _, m := range mods {
		data, err := os.ReadFile(m.path)
		if err != nil {
			return err
		}
		w.node("modules/"+file(m), 0o100644, data, 0, 0)
		fmt.Fprintf(&list, "%s\n", file(m))
		fmt.Fprintf(&aliases, "%s %s\n", m.name, file(m))
		for _, a := range m.aliases {
			fmt.Fprintf(&aliases, "%s %s\n", a, file(m))
		}
		// Direct dependencies; the guest follows them recursively.
		fmt.Fprintf(&deps, "%s:", file(m))
		for _, d := range m.depends {
			if f, ok := files[d]; ok {
				fmt.Fprintf(&deps, " %s", f)
			}
		}
		deps.WriteString("\n")
	}
	w.node("modules/load.list", 0o100644, []byte(list.String()), 0, 0)
	w.node("modules/modules.alias", 0o100644, []byte(aliases.String()), 0, 0)
	w.node("modules/modules.dep", 0o100644, []byte(deps.String()), 0, 0)
	w.node("TRAILER!!!", 0, nil, 0, 0)

	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(w.buf.Bytes())
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, gz.Bytes(), 0o644)
}
