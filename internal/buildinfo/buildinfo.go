// Package buildinfo is what this binary was built from: its version,
// VCS revision and working tree, and Go's build settings. engine version
// prints it and /metrics exports it (engine_build_info), so that an
// operator can tell which build answers.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Info is the build of the running binary.
type Info struct {
	Version   string // the stamped version, else the module's, else "dev"
	Commit    string // the VCS revision; "" when the build recorded none
	Tree      string // "clean", "modified", "modified-FINGERPRINT", or ""
	GoVersion string
	Platform  string // GOOS/GOARCH
	// Settings are Go's build settings other than the VCS ones
	// (-trimpath, CGO_ENABLED, GOAMD64, -ldflags, ...), "key=value".
	Settings []string
}

var (
	mu    sync.Mutex
	stamp struct{ version, commit, tree string }
)

// Stamp records what the build stamped with -ldflags -X (the main
// package's version, commit and tree): they take precedence over what
// Go's build information says. "" leaves a field to it.
func Stamp(version, commit, tree string) {
	mu.Lock()
	defer mu.Unlock()
	stamp.version, stamp.commit, stamp.tree = version, commit, tree
}

// Get is the running binary's build: the stamp, completed from Go's
// build information (the module version, and vcs.revision and
// vcs.modified when the build recorded them: not under go run, nor with
// -buildvcs=false).
func Get() Info {
	mu.Lock()
	i := Info{Version: stamp.version, Commit: stamp.commit, Tree: stamp.tree}
	mu.Unlock()
	i.GoVersion, i.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
	if bi, ok := debug.ReadBuildInfo(); ok {
		if (i.Version == "" || i.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		stamped := i.Commit != ""
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && !stamped:
				i.Commit = s.Value
			case s.Key == "vcs.modified" && !stamped:
				i.Tree = map[string]string{"true": "modified", "false": "clean"}[s.Value]
			case strings.HasPrefix(s.Key, "vcs."), s.Value == "":
			default:
				i.Settings = append(i.Settings, s.Key+"="+s.Value)
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	return i
}

// String is the one-line form engine version prints first: "engine dev
// go1.26.8 linux/amd64 (commit 0123...cdef, working tree clean)", the
// part in parentheses only when the build named its commit.
func (i Info) String() string {
	s := fmt.Sprintf("engine %s %s %s", i.Version, i.GoVersion, i.Platform)
	if i.Commit == "" {
		return s
	}
	s += " (commit " + i.Commit
	switch fp, modified := strings.CutPrefix(i.Tree, "modified"); {
	case i.Tree == "clean":
		s += ", working tree clean"
	case modified && fp != "":
		s += ", working tree modified, fingerprint " + strings.TrimPrefix(fp, "-")
	case modified:
		s += ", working tree modified"
	}
	return s + ")"
}
