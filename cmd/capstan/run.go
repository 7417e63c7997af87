package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// createOpts are run create's flags.
type createOpts struct {
	file, name  string
	wait, watch bool
	params      []string
	o           waitOpts
}

func newCreate(g *globals) *cobra.Command {
	var co createOpts
	cmd := &cobra.Command{
		Use:   "create -f WORKFLOW.yaml [--wait|--watch] [--name NAME] [--param KEY=VALUE]...",
		Short: "Create a run of each workflow spec of a file (YAML or JSON)",
		Long: `Create a run from a workflow spec file (YAML or JSON) and print its name.

A YAML file of several documents (separated by "---" lines) creates a run of
each, 1,000 to a request, and prints each run's name in order, or, on
stderr, "document N: " and why the API refused it; then it exits 3 if any
was refused. --name, --wait and --watch need a file of one document.

--wait waits for the run to end, printing each phase change, and exits 0 when
it SUCCEEDED, 1 when it ended in another phase; --watch shows the live table
of run watch, with the same exit codes. --param KEY=VALUE sets KEY in the
environment of every step (over the spec's env).

` + exitHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return co.run(cmd, g) },
	}
	cmd.Flags().BoolVar(&co.watch, "watch", false, "show the run's steps live until it ends")
	cmd.Flags().StringArrayVar(&co.params, "param", nil, "KEY=VALUE in every step's environment (repeatable)")
	cmd.Flags().StringVarP(&co.file, "file", "f", "", "workflow spec file (required)")
	cmd.Flags().StringVar(&co.name, "name", "", "run name (default: generated)")
	cmd.Flags().BoolVar(&co.wait, "wait", false, "wait until the run ends, printing each phase change")
	cmd.Flags().DurationVar(&co.o.timeout, "timeout", 10*time.Minute, "with --wait or --watch: give up after this long")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// run reads the file's specs and creates their runs: one through CreateRun
// (then --wait or --watch), several through the batch route (createRuns).
func (co createOpts) run(cmd *cobra.Command, g *globals) error {
	if co.wait && co.watch {
		return usagef("--wait and --watch exclude each other")
	}
	specs, err := readSpecs(co.file)
	if err != nil {
		return usageError{err}
	}
	for i := range specs {
		if err := setParams(&specs[i], co.params); err != nil {
			return err
		}
	}
	if len(specs) > 1 && (co.name != "" || co.wait || co.watch) {
		return usagef("--name, --wait and --watch take a file of one workflow; %s holds %d", co.file, len(specs))
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	if len(specs) > 1 {
		return createRuns(cmd.Context(), c, g, cmd.OutOrStdout(), cmd.ErrOrStderr(), specs)
	}
	body := api.CreateRunRequest{Spec: &specs[0]}
	if co.name != "" {
		body.Name = &co.name
	}
	resp, err := c.CreateRunWithResponse(cmd.Context(), g.project, g.domain, nil, body)
	if err != nil {
		return fmt.Errorf("create the run of %s: %w", co.file, err)
	}
	run := resp.JSON201
	if run == nil {
		run = resp.JSON200
	}
	if run == nil {
		return apiError(resp.StatusCode(), resp.Body)
	}
	if err := g.printLine(cmd.OutOrStdout(), run, run.Name); err != nil {
		return err
	}
	switch {
	case co.watch:
		return watchRun(cmd.Context(), c, g, cmd.OutOrStdout(), run.Name, co.o.timeout)
	case co.wait:
		return waitRun(cmd.Context(), c, g, run.Name, co.o)
	}
	return nil
}

// setParams sets each KEY=VALUE of params in the env of every step of spec.
func setParams(spec *api.WorkflowSpec, params []string) error {
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return usagef("--param %q: want KEY=VALUE", p)
		}
		for i := range spec.Steps {
			st := &spec.Steps[i]
			if st.Env == nil {
				st.Env = &map[string]string{}
			}
			(*st.Env)[k] = v
		}
	}
	return nil
}

func getRun(ctx context.Context, c *api.ClientWithResponses, g *globals, name string) (*api.Run, error) {
	resp, err := c.GetRunWithResponse(ctx, g.project, g.domain, name)
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", name, err)
	}
	if resp.JSON200 == nil {
		return nil, apiError(resp.StatusCode(), resp.Body)
	}
	return resp.JSON200, nil
}

// waitOpts says what waitRun waits for.
type waitOpts struct {
	// expect is the phase the run must end in (default SUCCEEDED).
	expect api.Phase
	// untilStep, untilPhase: return once that step reaches that phase.
	untilStep  string
	untilPhase api.Phase
	timeout    time.Duration
}

// waitRun polls a run until it ends (or a step reaches a phase), printing each
// action's phase changes; an unexpected end is an error.
func waitRun(ctx context.Context, c *api.ClientWithResponses, g *globals, name string, o waitOpts) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.expect == "" {
		o.expect = api.PhaseSUCCEEDED
	}
	seen := map[string]api.Phase{}
	for {
		run, err := getRun(ctx, c, g, name)
		if err != nil {
			return err
		}
		for _, a := range run.Actions {
			if seen[a.Name] != a.Phase {
				seen[a.Name] = a.Phase
				label := "step " + a.Name
				if a.Name == "a0" {
					label = "run  " + run.Name
				}
				fmt.Printf("%s  %-28s %s\n", time.Now().Format("15:04:05.000"), label, a.Phase)
			}
			if o.untilStep != "" && a.Name == o.untilStep && a.Phase == o.untilPhase {
				return nil
			}
		}
		if run.EndedAt != nil {
			if o.untilStep != "" || run.Phase != o.expect {
				return &runFailed{run: run.Name, phase: run.Phase}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s still %s after %s", name, run.Phase, o.timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func newWait(g *globals) *cobra.Command {
	var o waitOpts
	var expect, until string
	cmd := &cobra.Command{
		Use:   "wait RUN",
		Short: "Wait until a run ends (exit 1 unless it ends in --expect) or a step reaches a phase",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.expect = api.Phase(expect)
			if until != "" {
				step, phase, ok := strings.Cut(until, "=")
				if !ok || step == "" || phase == "" {
					return fmt.Errorf("--until-step wants STEP=PHASE, got %q", until)
				}
				o.untilStep, o.untilPhase = step, api.Phase(phase)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return waitRun(cmd.Context(), c, g, args[0], o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	cmd.Flags().StringVar(&expect, "expect", "SUCCEEDED", "the phase the run must end in")
	cmd.Flags().StringVar(&until, "until-step", "", "STEP=PHASE: return once that step reaches that phase")
	return cmd
}

func newWaitAbort(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait-abort RUN",
		Short: "Wait until a run's abort has been delivered to the executors",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for {
				run, err := getRun(ctx, c, g, args[0])
				if err != nil {
					return err
				}
				for _, a := range run.Actions {
					if a.Name == "a0" && a.Abort != nil && a.Abort.Outcome != nil {
						fmt.Println(abortNote(a))
						if *a.Abort.Outcome != "delivered" {
							return fmt.Errorf("abort of %s not delivered", args[0])
						}
						return nil
					}
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("abort of %s still being delivered after %s", args[0], timeout)
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	return cmd
}

func newGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get RUN",
		Short: "Show a run with its actions, tasks and attempts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			run, err := getRun(cmd.Context(), c, g, args[0])
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), run, func(w io.Writer) { printRun(w, run) })
		},
	}
}

// printRun writes run as a table: a heading line, then a line per task (and
// per action without tasks or with a note).
func printRun(w io.Writer, run *api.Run) {
	suspended := ""
	if run.Suspended != nil && *run.Suspended {
		suspended = "  (suspended)"
	}
	fmt.Fprintf(w, "run %s/%s/%s  %s%s\n", run.Project, run.Domain, run.Name, run.Phase, suspended)
	fmt.Fprintln(w, "ACTION\tPHASE\tTASK\tSTATE\tATTEMPTS")
	for _, a := range run.Actions {
		if note := actionNote(a); len(a.Tasks) == 0 || note != "" {
			fmt.Fprintf(w, "%s\t%s\t\t\t%s\n", a.Name, a.Phase, note)
		}
		for _, t := range a.Tasks {
			var atts []string
			for _, at := range t.Attempts {
				s := fmt.Sprintf("#%d %s", at.Number, at.State)
				if at.ExitCode != nil {
					s += fmt.Sprintf(" exit=%d", *at.ExitCode)
				}
				if at.Cause != nil && at.State == api.TaskStateFAILED {
					s += " " + *at.Cause
				}
				if at.Code != nil {
					s += " " + *at.Code
				}
				atts = append(atts, s)
			}
			task := strconv.Itoa(t.Index)
			if g := deref(t.Generation); g > 0 {
				task += fmt.Sprintf(" (gen %d)", g) // a retried or restarted step's later tasks
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a.Name, a.Phase, task, t.State, strings.Join(atts, ", "))
		}
	}
}

func abortNote(a api.Action) string {
	if a.Abort == nil {
		return ""
	}
	switch {
	case a.Abort.Outcome != nil && *a.Abort.Outcome == "needs_intervention":
		return fmt.Sprintf("abort: manual intervention may be required (%d attempts)", a.Abort.AttemptCount)
	case a.Abort.Outcome != nil:
		return fmt.Sprintf("abort: %s after %d attempt(s)", *a.Abort.Outcome, a.Abort.AttemptCount)
	}
	return fmt.Sprintf("abort: delivering (%d attempt(s) so far)", a.Abort.AttemptCount)
}

func newAbort(g *globals) *cobra.Command {
	return abortCommand(g, "abort RUN", "Abort a run (delivery to executors is asynchronous and reliable)", 1,
		func(ctx context.Context, c *api.ClientWithResponses, args []string, body api.AbortRequest) (*api.Action, int, []byte, error) {
			resp, err := c.AbortRunWithResponse(ctx, g.project, g.domain, args[0], body)
			if err != nil {
				return nil, 0, nil, fmt.Errorf("abort run %s: %w", args[0], err)
			}
			return resp.JSON202, resp.StatusCode(), resp.Body, nil
		})
}

// abortCommand is the `abort` of a run or of an action (nargs of RUN
// ACTION): send posts the request, with --reason when given, and returns
// the accepted action, or the status and body of a refusal.
func abortCommand(g *globals, use, short string, nargs int,
	send func(context.Context, *api.ClientWithResponses, []string, api.AbortRequest) (*api.Action, int, []byte, error)) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(nargs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			body := api.AbortRequest{}
			if reason != "" {
				body.Reason = &reason
			}
			accepted, status, raw, err := send(cmd.Context(), c, args, body)
			if err != nil {
				return err
			}
			if accepted == nil {
				return apiError(status, raw)
			}
			return g.printLine(cmd.OutOrStdout(), accepted,
				fmt.Sprintf("abort of %s accepted (phase %s)", strings.Join(args, "/"), accepted.Phase))
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why (default "User requested abort")`)
	return cmd
}
