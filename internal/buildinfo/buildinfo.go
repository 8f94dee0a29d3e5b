// Package buildinfo says which skuldd a binary is: its module version,
// VCS revision and Go release, as the Go toolchain stamped them. It is a
// leaf: the CLI's --version and the node's skuldd_build_info metric read
// it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// Unknown stands for what a build does not record: a test binary, or
// one built with -buildvcs=false or outside a git checkout, has no VCS
// revision.
const Unknown = "unknown"

// Info is what the binary records of its build.
type Info struct {
	// Version is the module version (Go stamps a pseudo-version from the
	// VCS since 1.24; "(devel)" for a build of a dirty tree).
	Version string
	// Revision is the VCS commit, Unknown if none was stamped.
	Revision string
	// Modified: built from a tree with uncommitted changes.
	Modified bool
	// GoVersion is the Go release that built it.
	GoVersion string
}

// Read returns the binary's build information; it cannot change, so it
// is read once.
var Read = sync.OnceValue(func() Info {
	in := Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				in.Revision = s.Value
			}
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
})

// String is one line for --version: "VERSION (revision R[, modified], GO)".
func (in Info) String() string {
	mod := ""
	if in.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("%s (revision %s%s, %s)", in.Version, in.Revision, mod, in.GoVersion)
}
