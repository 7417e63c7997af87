package main

import (
	"cmp"
	"os"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// globals are the flags every command shares.
type globals struct {
	apiURL, project, domain string
}

func (g *globals) client() (*api.ClientWithResponses, error) {
	return api.NewClientWithResponses(g.apiURL)
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "capstan",
		Short:         "Capstan workflow orchestration client",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.apiURL, "api", cmp.Or(os.Getenv("CAPSTAN_API_URL"), "http://127.0.0.1:8080"),
		"Capstan API base URL (env CAPSTAN_API_URL)")
	root.PersistentFlags().StringVarP(&g.project, "project", "p", cmp.Or(os.Getenv("CAPSTAN_PROJECT"), "demo"),
		"project (env CAPSTAN_PROJECT)")
	root.PersistentFlags().StringVarP(&g.domain, "domain", "d", cmp.Or(os.Getenv("CAPSTAN_DOMAIN"), "dev"),
		"domain (env CAPSTAN_DOMAIN)")
	run := &cobra.Command{Use: "run", Short: "Create, inspect, wait for, abort, suspend, resume and restart runs"}
	run.AddCommand(newCreate(g), newGet(g), newList(g), newWait(g), newWaitAbort(g), newAbort(g),
		newSuspend(g), newResume(g), newRestart(g))
	root.AddCommand(run, newApprove(g), newReject(g), newLogs(g), newWorkers(g))
	return root
}
