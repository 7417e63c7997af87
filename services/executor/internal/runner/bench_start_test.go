package runner_test

import (
	"os"
	"testing"

	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// BenchmarkStart is the cost of one attempt's process: the shim, `/bin/sh
// -c true`, its end; as a process group, in a PID namespace as a user of
// its own, with a private /tmp (mount and IPC namespaces) as a sandboxed
// attempt has, and with a network namespace too (network: none).
func BenchmarkStart(b *testing.B) {
	cred := &runner.Credential{UID: 190900, GID: 190900}
	umask := 0o007
	sandboxed := func(noNetwork bool) *runner.Isolation {
		return &runner.Isolation{PIDNamespace: true, NoNetwork: noNetwork, NoNewPrivs: true, MaxProcs: 1024,
			Umask: &umask, PrivateTmp: "TMP"}
	}
	for _, bc := range []struct {
		name  string
		runAs *runner.Credential
		iso   *runner.Isolation
	}{
		{"group", nil, nil},
		{"pidns", cred, &runner.Isolation{PIDNamespace: true, MaxProcs: 1024}},
		{"sandbox", cred, sandboxed(false)},
		{"sandbox+netns", cred, sandboxed(true)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.iso != nil && os.Geteuid() != 0 {
				b.Skip("isolation needs root")
			}
			dir := b.TempDir()
			if bc.iso != nil && bc.iso.PrivateTmp != "" {
				if err := os.Chown(dir, int(cred.UID), int(cred.GID)); err != nil {
					b.Fatal(err)
				}
				iso := *bc.iso
				iso.PrivateTmp = dir
				bc.iso = &iso
			}
			for b.Loop() {
				p, err := runner.Start(runner.Spec{Command: "true", Dir: dir, LogLimit: 1024, RunAs: bc.runAs,
					Isolation: bc.iso})
				if err != nil {
					b.Fatal(err)
				}
				if res := p.Wait(); res.ExitCode != 0 {
					b.Fatal(res)
				}
			}
		})
	}
}
