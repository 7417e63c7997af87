package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
)

// Every value the spec lists for an enum flag is one pkg/api's generated
// Valid accepts, and the lists are not empty.
func TestEnumValuesAreTheGeneratedOnes(t *testing.T) {
	t.Parallel()
	check := func(source enumSource, valid func(string) bool) {
		t.Helper()
		vals := source.values()
		if len(vals) == 0 {
			t.Errorf("%+v: no values", source)
		}
		for _, v := range vals {
			if !valid(v) {
				t.Errorf("%+v: %q is not Valid", source, v)
			}
		}
	}
	check(phaseEnum, func(s string) bool { return api.Phase(s).Valid() })
	check(roleEnum, func(s string) bool { return api.Role(s).Valid() })
	check(overlapEnum, func(s string) bool { return api.OverlapPolicy(s).Valid() })
	check(abortStateEnum, func(s string) bool { return api.ListAbortsParamsState(s).Valid() })
}

// A value outside an enum flag's is refused before any request (exit 2),
// naming the flag and listing the values it takes.
func TestEnumFlagsAreCheckedLocally(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args       []string
		flag, want string
	}{
		{[]string{"run", "list", "--phase", "BOGUS"}, "--phase", "QUEUED, WAITING_FOR_RESOURCES, WAITING_FOR_CACHE, RUNNING"},
		{[]string{"run", "wait", "r1", "--expect", "DONE"}, "--expect", "SUCCEEDED"},
		{[]string{"run", "wait", "r1", "--until-step", "a=DONE"}, "--until-step", "PAUSED"},
		{[]string{"token", "create", "ci", "--role", "superuser"}, "--role", "admin, writer, reader, worker"},
		{[]string{"aborts", "--state", "lost"}, "--state", "pending, delivered, needs_intervention"},
		{[]string{"schedule", "trigger", "nightly", "--overlap", "sometimes"}, "--overlap", "buffer_one"},
	}
	for _, c := range cases {
		s, srv := newStandIn(t, http.StatusOK, "application/json", "{}")
		_, err := capstan(srv, c.args...)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v (exit %d), want exit 2 naming %s and listing %s", c.args, err, exitCode(err), c.flag, c.want)
		}
		if n := len(s.received()); n > 0 {
			t.Errorf("%q: %d requests sent, want none", c.args, n)
		}
	}
}
