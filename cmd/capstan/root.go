package main

import (
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
	// context is --context: the configuration's context to use instead of
	// the current one ("" the current one).
	context string
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
			if err := checkOutput(cmd, g.output); err != nil {
				return err
			}
			return g.resolve(cmd)
		},
	}
	root.PersistentFlags().StringVar(&g.apiURL, "api", "",
		"Capstan API base URL (env CAPSTAN_API, or CAPSTAN_API_URL; else the context's; default "+defaultAPI+")")
	root.PersistentFlags().StringVarP(&g.project, "project", "p", "",
		"project (env CAPSTAN_PROJECT; else the context's; default "+defaultProject+")")
	root.PersistentFlags().StringVarP(&g.domain, "domain", "d", "",
		"domain (env CAPSTAN_DOMAIN; else the context's; default "+defaultDomain+")")
	root.PersistentFlags().StringVar(&g.context, "context", "", "use this context of the configuration, not the current one (see capstan config)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", outTable, "output format: table, json or yaml (run list also: name, wide, jsonl)")
	root.PersistentFlags().StringVar(&g.token, "token", "",
		"API token sent as Authorization: Bearer (env CAPSTAN_TOKEN, else the context's token_file; prefer those: flags show in ps)")
	root.PersistentFlags().DurationVar(&g.requestTimeout, "request-timeout", defaultRequestTimeout,
		"bound each request to the API to this long (a stream's connect and response headers)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	run := &cobra.Command{Use: "run", Short: "Create, inspect, watch, wait for, abort, suspend, resume, restart and delete runs"}
	run.AddCommand(newCreate(g), newGet(g), newList(g), newWait(g), newWaitAbort(g), newAbort(g), newDelete(g),
		newSuspend(g), newResume(g), newRestart(g), newWatch(g))
	root.AddCommand(run, newWorkflow(g), newSchedule(g), newEvent(g), newTrigger(g), newConcurrency(g), newAction(g),
		newApprove(g), newReject(g), newLogs(g), newWorkers(g), newAborts(g), newCache(g), newToken(g), newRateLimit(g),
		newFairShare(g), newSettings(g), newVersion(g), newLint(), newConfig())
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	wrapArgs(root)
	setExamples(root)
	setCompletions(root, g)
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
