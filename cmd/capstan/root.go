package main

import (
	"cmp"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// globals are the flags every command shares.
type globals struct {
	apiURL, project, domain string
	// output is -o: table, json or yaml.
	output string
	// token is the bearer secret every request carries ("" none).
	token string
	// requestTimeout bounds each request (a stream's connect and headers).
	requestTimeout time.Duration
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "capstan",
		Short:         "Capstan workflow orchestration client",
		Long:          "Capstan workflow orchestration client.\n\n" + exitHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return checkOutput(cmd, g.output)
		},
	}
	root.PersistentFlags().StringVar(&g.apiURL, "api",
		cmp.Or(os.Getenv("CAPSTAN_API"), os.Getenv("CAPSTAN_API_URL"), "http://127.0.0.1:8080"),
		"Capstan API base URL (env CAPSTAN_API, or CAPSTAN_API_URL)")
	root.PersistentFlags().StringVarP(&g.project, "project", "p", cmp.Or(os.Getenv("CAPSTAN_PROJECT"), "demo"),
		"project (env CAPSTAN_PROJECT)")
	root.PersistentFlags().StringVarP(&g.domain, "domain", "d", cmp.Or(os.Getenv("CAPSTAN_DOMAIN"), "dev"),
		"domain (env CAPSTAN_DOMAIN)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", outTable, "output format: table, json or yaml (run list also: name, wide, jsonl)")
	root.PersistentFlags().StringVar(&g.token, "token", os.Getenv("CAPSTAN_TOKEN"),
		"API token sent as Authorization: Bearer (env CAPSTAN_TOKEN; prefer the env: flags show in ps)")
	root.PersistentFlags().DurationVar(&g.requestTimeout, "request-timeout", defaultRequestTimeout,
		"bound each request to the API to this long (a stream's connect and response headers)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	run := &cobra.Command{Use: "run", Short: "Create, inspect, watch, wait for, abort, suspend, resume, restart and delete runs"}
	run.AddCommand(newCreate(g), newGet(g), newList(g), newWait(g), newWaitAbort(g), newAbort(g), newDelete(g),
		newSuspend(g), newResume(g), newRestart(g), newWatch(g))
	root.AddCommand(run, newWorkflow(g), newSchedule(g), newEvent(g), newTrigger(g), newConcurrency(g), newAction(g),
		newApprove(g), newReject(g), newLogs(g), newWorkers(g), newAborts(g), newCache(g), newToken(g), newRateLimit(g),
		newFairShare(g), newSettings(g), newVersion(g), newLint())
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	wrapArgs(root)
	setExamples(root)
	return root
}

// wrapArgs makes the argument checks of cmd and its subcommands return
// usage errors (exit 2).
func wrapArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		wrapArgs(sub)
	}
}
