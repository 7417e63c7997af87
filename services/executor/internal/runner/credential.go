package runner

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// Credential is a numeric user and group an attempt's process runs as
// (CAPSTAN_EXECUTOR_RUN_AS), so that a task cannot read the executor's
// environment (/proc/<pid>/environ is its owner's) or signal other
// attempts' processes.
type Credential struct {
	UID, GID uint32
}

// ParseCredential reads "uid:gid", both decimal numbers. Errors: another
// shape, or a number out of range.
func ParseCredential(s string) (Credential, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, errU := strconv.ParseUint(u, 10, 32)
	gid, errG := strconv.ParseUint(g, 10, 32)
	if !ok || errU != nil || errG != nil {
		return Credential{}, fmt.Errorf("run as %q: want uid:gid, two numbers", s)
	}
	return Credential{UID: uint32(uid), GID: uint32(gid)}, nil
}

// String is "uid:gid".
func (c Credential) String() string { return fmt.Sprintf("%d:%d", c.UID, c.GID) }

// UnmarshalText parses "uid:gid" (ParseCredential), for the environment.
func (c *Credential) UnmarshalText(text []byte) error {
	v, err := ParseCredential(string(text))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// sys is the credential for os/exec: that user and group, and no
// supplementary groups (an empty list, not the executor's).
func (c Credential) sys() *syscall.Credential {
	return &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
}
