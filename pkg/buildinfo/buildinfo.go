// Package buildinfo says which build of Capstan a binary is: its release
// version, the VCS commit it was built from, when, and with which Go.
package buildinfo

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// Stamped by a release build with -ldflags "-X
// github.com/capstan-run/capstan/pkg/buildinfo.Version=v1.2.3 -X ...Commit=...
// -X ...Date=..." (make dist does). Default "": Read falls back to what the
// Go toolchain recorded in the binary.
var (
	// Version is the release version, e.g. `git describe --tags --always
	// --dirty`'s v0.4.0-3-g9bc1cd1.
	Version string
	// Commit is the VCS revision the binary was built from.
	Commit string
	// Date is the build time, RFC 3339 in UTC.
	Date string
)

// Info is a binary's build.
type Info struct {
	// Version is the stamped Version, else the main module's version
	// ("(devel)" for a build from a work tree).
	Version string
	// Commit is the stamped Commit, else the vcs.revision Go recorded, with
	// "-dirty" when vcs.modified; "" when neither is known.
	Commit string
	// Time is the stamped Date, else the vcs.time of the commit; "" when
	// unknown.
	Time string
	// GoVersion is the Go release the binary was built with ("go1.26.0").
	GoVersion string
}

// Read returns the running binary's build.
func Read() Info {
	info := Info{Version: Version, Commit: Commit, Time: Date, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	var rev, at string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	info.Version = cmp.Or(info.Version, bi.Main.Version, "(devel)")
	info.Commit = cmp.Or(info.Commit, rev)
	info.Time = cmp.Or(info.Time, at)
	return info
}
