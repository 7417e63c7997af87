package runner

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// Credential is a numeric user and group an attempt's process runs as (the
// attempt's own with a sandbox, else CAPSTAN_EXECUTOR_RUN_AS), so that a
// task cannot read the executor's environment (/proc/<pid>/environ is its
// owner's) or signal other attempts' processes.
type Credential struct {
	UID, GID uint32
	// Groups are its supplementary groups (the run directory's group); none
	// when empty.
	Groups []uint32
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

// shimForm is "uid:gid", then ":g1,g2" when it has supplementary groups.
func (c Credential) shimForm() string {
	if len(c.Groups) == 0 {
		return c.String()
	}
	groups := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	return c.String() + ":" + strings.Join(groups, ",")
}

// parseShimForm reads shimForm.
func parseShimForm(s string) (Credential, error) {
	user, groups, _ := strings.Cut(s, ":")
	gid, groups, _ := strings.Cut(groups, ":")
	c, err := ParseCredential(user + ":" + gid)
	if err != nil || groups == "" {
		return c, err
	}
	for _, g := range strings.Split(groups, ",") {
		v, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return Credential{}, fmt.Errorf("run as %q: bad group %q", s, g)
		}
		c.Groups = append(c.Groups, uint32(v))
	}
	return c, nil
}

// UnmarshalText parses "uid:gid" (ParseCredential), for the environment.
func (c *Credential) UnmarshalText(text []byte) error {
	v, err := ParseCredential(string(text))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// sys is the credential for os/exec: that user and group, and only its
// supplementary groups (an empty list, never the executor's).
func (c Credential) sys() *syscall.Credential {
	return &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: append([]uint32{}, c.Groups...)}
}
