package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// createOpts are run create's flags.
type createOpts struct {
	file, workflow, name string
	wait, watch          bool
	params               []string
	o                    waitOpts
}

func newCreate(g *globals) *cobra.Command {
	var co createOpts
	cmd := &cobra.Command{
		Use:   "create (-f WORKFLOW.yaml | --workflow NAME[@VERSION]) [--param KEY=VALUE]... [--wait|--watch] [--name NAME]",
		Short: "Create a run of a template, or of each workflow spec of a file (YAML or JSON)",
		Long: `Create a run and print its name: of the template --workflow names (its
latest version, or VERSION), or of the workflow spec of a file (YAML or JSON).

--param KEY=VALUE gives the run's param KEY (repeatable). VALUE becomes the
JSON value of the type KEY is declared with, in the template or in the
spec's params: a number (3, 1.5), a boolean (true or false), json (parsed:
'{"a": [1]}'), a string (as it is). A KEY not declared, or a VALUE not of its
type, is a usage error naming it. A run of the latest template with --param
is of the version read to convert them.

A YAML file of several documents (separated by "---" lines) creates a run of
each, 1,000 to a request, and prints each run's name in order, or, on
stderr, "document N: " and why the API refused it; then it exits 3 if any
was refused. --name, --wait and --watch need a file of one document.

--wait waits for the run to end, printing each phase change, and exits 0 when
it SUCCEEDED, 1 when it ended in another phase; --watch shows the live table
of run watch, with the same exit codes.

` + exitHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return co.run(cmd, g) },
	}
	cmd.Flags().BoolVar(&co.watch, "watch", false, "show the run's steps live until it ends")
	cmd.Flags().StringArrayVar(&co.params, "param", nil, "KEY=VALUE: the run's param KEY, converted to its declared type (repeatable)")
	cmd.Flags().StringVarP(&co.file, "file", "f", "", "workflow spec file")
	cmd.Flags().StringVar(&co.workflow, "workflow", "", "NAME or NAME@VERSION: run this template (instead of -f)")
	cmd.Flags().StringVar(&co.name, "name", "", "run name (default: generated)")
	cmd.Flags().BoolVar(&co.wait, "wait", false, "wait until the run ends, printing each phase change")
	cmd.Flags().DurationVar(&co.o.timeout, "timeout", 10*time.Minute, "with --wait or --watch: give up after this long")
	return cmd
}

// run creates the run --workflow names or the runs of the file's specs:
// one through CreateRun (then --wait or --watch), several through the
// batch route (createRuns).
func (co createOpts) run(cmd *cobra.Command, g *globals) error {
	switch {
	case co.wait && co.watch:
		return usagef("--wait and --watch exclude each other")
	case (co.file == "") == (co.workflow == ""):
		return usagef("give one of -f FILE and --workflow NAME[@VERSION]")
	}
	texts, err := paramArgs(co.params)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	if co.workflow != "" {
		body, err := co.templateRun(cmd.Context(), c, g, texts)
		if err != nil {
			return err
		}
		return co.create(cmd, c, g, body)
	}
	items, err := co.specRuns(texts)
	if err != nil {
		return err
	}
	if len(items) > 1 {
		return createRuns(cmd.Context(), c, g, cmd.OutOrStdout(), cmd.ErrOrStderr(), items)
	}
	return co.create(cmd, c, g, api.CreateRunRequest{Spec: items[0].Spec, Params: items[0].Params})
}

// templateRun is the body of a run of the template --workflow names, its
// params converted by the types the template declares (read from the API
// when there are any). A run with params is pinned to the version read, so
// that a version pushed meanwhile cannot declare other types.
func (co createOpts) templateRun(ctx context.Context, c *api.ClientWithResponses, g *globals,
	texts map[string]string) (api.CreateRunRequest, error) {
	ref, err := parseRef(co.workflow)
	if err != nil {
		return api.CreateRunRequest{}, err
	}
	body := api.CreateRunRequest{Workflow: &ref}
	if len(texts) == 0 {
		return body, nil
	}
	t, err := getTemplate(ctx, c, g, ref)
	if err != nil {
		return body, err
	}
	ref.Version = &t.Version
	body.Params, err = typedParams(templateParams(t), texts, fmt.Sprintf("workflow %s version %d", t.Name, t.Version))
	return body, err
}

// templateParams are the params t declares.
func templateParams(t *api.WorkflowTemplate) []api.Param {
	if len(t.Params) == 0 && t.Spec.Params != nil {
		return *t.Spec.Params
	}
	return t.Params
}

// specRuns reads the file's specs, each with the params texts give,
// converted by the types that spec declares.
func (co createOpts) specRuns(texts map[string]string) ([]api.CreateRunsItem, error) {
	specs, err := readSpecs(co.file)
	if err != nil {
		return nil, usageError{err}
	}
	if len(specs) > 1 && (co.name != "" || co.wait || co.watch) {
		return nil, usagef("--name, --wait and --watch take a file of one workflow; %s holds %d", co.file, len(specs))
	}
	items := make([]api.CreateRunsItem, len(specs))
	for i := range specs {
		owner := co.file
		if len(specs) > 1 {
			owner = fmt.Sprintf("%s (document %d)", co.file, i+1)
		}
		params, err := typedParams(deref(specs[i].Params), texts, owner)
		if err != nil {
			return nil, err
		}
		items[i] = api.CreateRunsItem{Spec: &specs[i], Params: params}
	}
	return items, nil
}

// create creates one run (named --name when given), prints its name, then
// waits or watches as asked.
func (co createOpts) create(cmd *cobra.Command, c *api.ClientWithResponses, g *globals, body api.CreateRunRequest) error {
	if co.name != "" {
		body.Name = &co.name
	}
	resp, err := c.CreateRunWithResponse(cmd.Context(), g.project, g.domain, nil, body)
	if err != nil {
		return fmt.Errorf("create the run of %s: %w", nonEmpty(co.file, co.workflow), err)
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
	phase := api.Phase("")
	for {
		run, err := getRun(ctx, c, g, name)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return runTimedOut(name, phase, o.timeout)
		}
		if err != nil {
			return err
		}
		phase = run.Phase
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
			return runTimedOut(name, run.Phase, o.timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runTimedOut is the waitTimeout of a run that was still in phase
// ("" unread) when the wait's timeout passed.
func runTimedOut(name string, phase api.Phase, timeout time.Duration) error {
	still := ""
	if phase != "" {
		still = fmt.Sprintf("still %s ", phase)
	}
	return &waitTimeout{what: fmt.Sprintf("run %s did not end in time (%safter --timeout %s)", name, still, timeout)}
}

func newWait(g *globals) *cobra.Command {
	var o waitOpts
	var until string
	cmd := &cobra.Command{
		Use:   "wait RUN",
		Short: "Wait until a run ends (exit 1 unless it ends in --expect) or a step reaches a phase",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if until != "" {
				step, phase, ok := strings.Cut(until, "=")
				if !ok || step == "" || phase == "" {
					return usagef("--until-step wants STEP=PHASE, got %q", until)
				}
				p, err := parseEnum[api.Phase](phaseEnum, phase)
				if err != nil {
					return usagef("--until-step %s: %v", until, err)
				}
				o.untilStep, o.untilPhase = step, p
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return waitRun(cmd.Context(), c, g, args[0], o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	enumFlag(cmd, &o.expect, phaseEnum, "phase", "expect", api.PhaseSUCCEEDED, "the phase the run must end in")
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
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return &waitTimeout{what: fmt.Sprintf("abort of %s not delivered in time (--timeout %s)", args[0], timeout)}
				}
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
					return &waitTimeout{what: fmt.Sprintf("abort of %s not delivered in time (--timeout %s)", args[0], timeout)}
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	return cmd
}

func newGet(g *globals) *cobra.Command {
	var archived bool
	cmd := &cobra.Command{
		Use:   "get RUN",
		Short: "Show a run with its actions, tasks and attempts",
		Long: `Show a run with its actions, tasks and attempts. With --archived, show a
deleted run as the api's archive (CAPSTAN_ARCHIVE_URL) kept it: as this
command showed it before the delete.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			get := getRun
			if archived {
				get = getArchivedRun
			}
			run, err := get(cmd.Context(), c, g, args[0])
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), run, func(w io.Writer) { printRun(w, run) })
		},
	}
	cmd.Flags().BoolVar(&archived, "archived", false, "read the run from the archive, where its delete wrote it")
	return cmd
}

// getArchivedRun reads a deleted run from the api's archive.
func getArchivedRun(ctx context.Context, c *api.ClientWithResponses, g *globals, name string) (*api.Run, error) {
	resp, err := c.GetArchivedRunWithResponse(ctx, g.project, g.domain, name)
	if err != nil {
		return nil, fmt.Errorf("get archived run %s: %w", name, err)
	}
	if resp.JSON200 == nil {
		return nil, apiError(resp.StatusCode(), resp.Body)
	}
	return resp.JSON200, nil
}

// printRun writes run as a table: a heading line, then a line per action
// with its tasks counted by state (however many tasks a step has: `capstan
// action get` lists them, a page at a time).
func printRun(w io.Writer, run *api.Run) {
	suspended := ""
	if run.Suspended != nil && *run.Suspended {
		suspended = "  (suspended)"
	}
	fmt.Fprintf(w, "run %s/%s/%s  %s%s\n", run.Project, run.Domain, run.Name, run.Phase, suspended)
	if o := origin(run); o != "" {
		fmt.Fprintln(w, o)
	}
	if run.PendingReason != nil {
		fmt.Fprintf(w, "waiting: %s\n", *run.PendingReason)
	}
	if run.Params != nil && len(*run.Params) > 0 {
		raw, _ := json.Marshal(*run.Params) // decoded JSON: it encodes
		fmt.Fprintf(w, "params %s\n", raw)
	}
	printKin(w, run)
	fmt.Fprintln(w, "ACTION\tPHASE\tTASKS\tBY STATE\tNOTE")
	for _, a := range run.Actions {
		tasks := ""
		if a.TaskCount > 0 || a.Kind == "task" {
			tasks = strconv.Itoa(a.TaskCount)
			if g := deref(a.Generation); g > 0 {
				tasks += fmt.Sprintf(" (gen %d)", g) // a retried or restarted step's current tasks
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a.Name, a.Phase, tasks, byState(a.TaskCounts), actionNote(a))
	}
}

// byState writes task counts in the Iris order of their states:
// "SUCCEEDED 9990, RUNNING 10"; "" for none.
func byState(counts map[string]int) string {
	var parts []string
	for _, st := range taskStates {
		if n := counts[string(st)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, n))
		}
	}
	for _, st := range slices.Sorted(maps.Keys(counts)) { // a state this CLI does not know yet
		if !slices.Contains(taskStates, api.TaskState(st)) {
			parts = append(parts, fmt.Sprintf("%s %d", st, counts[st]))
		}
	}
	return strings.Join(parts, ", ")
}

// taskStates are the task states in the order a run's table shows them:
// live first, then the ends.
var taskStates = []api.TaskState{api.TaskStatePENDING, api.TaskStateASSIGNED, api.TaskStateBUILDING,
	api.TaskStateRUNNING, api.TaskStateSUCCEEDED, api.TaskStateFAILED, api.TaskStateKILLED, api.TaskStateWORKERFAILED,
	api.TaskStatePREEMPTED, api.TaskStateUNSCHEDULABLE}

// printTasks writes an action's page of tasks as a table: a line per task
// with its attempts, then the command that shows the next page, if any.
func printTasks(w io.Writer, run string, a *api.Action) {
	fmt.Fprintf(w, "action %s of run %s  %s  %d tasks", a.Name, run, a.Phase, a.TaskCount)
	if s := byState(a.TaskCounts); s != "" {
		fmt.Fprintf(w, " (%s)", s)
	}
	fmt.Fprintln(w)
	if note := actionNote(*a); note != "" {
		fmt.Fprintln(w, note)
	}
	fmt.Fprintln(w, "TASK\tSTATE\tATTEMPTS")
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
		if g := deref(t.Generation); g != deref(a.Generation) {
			task += fmt.Sprintf(" (gen %d)", g) // an earlier generation's, after the current one's
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", task, t.State, strings.Join(atts, ", "))
	}
	if a.TasksNextCursor != nil {
		fmt.Fprintf(w, "more: capstan action get %s %s --cursor %s\n", run, a.Name, *a.TasksNextCursor)
	}
}

// printKin writes the run's parent ("parent RUN step STEP"), when it is a
// child run, and a line per child run of its workflow steps.
func printKin(w io.Writer, run *api.Run) {
	if p := run.Parent; p != nil {
		fmt.Fprintf(w, "parent %s step %s\n", p.Run, p.Action)
	}
	if run.Children == nil {
		return
	}
	for _, c := range *run.Children {
		fmt.Fprintf(w, "child %s\t%s\tstep %s index %d try %d\n", c.Name, c.Phase, c.Action, c.Index, c.Try)
	}
}

// origin says where run comes from: "from workflow W version N", "by
// schedule S for T", "by trigger T for event E", joined with ", "; "" for a
// run of an inline spec created by hand.
func origin(run *api.Run) string {
	var parts []string
	if w := run.Workflow; w != nil {
		parts = append(parts, fmt.Sprintf("from workflow %s version %d", w.Name, w.Version))
	}
	if run.Schedule != nil {
		at := ""
		if run.ScheduledAt != nil {
			at = " for " + run.ScheduledAt.UTC().Format(time.RFC3339)
		}
		parts = append(parts, "by schedule "+*run.Schedule+at)
	}
	if run.Trigger != nil {
		parts = append(parts, "by trigger "+*run.Trigger+" for event "+deref(run.EventId))
	}
	return strings.Join(parts, ", ")
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

func newDelete(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete RUN",
		Short: "Delete an ended run, its child runs and every row they own",
		Long: `Delete an ended run with its child runs (and theirs), their actions, tasks,
attempts, logs and events, and print the runs deleted. A run that, or one of
whose child runs or whose parent run, has not ended is refused (409
not_terminal) and nothing changes: abort it first, and delete it once ended.
With the api's archive on (CAPSTAN_ARCHIVE_URL), each run is archived first
(run get --archived shows it); a run that cannot be is refused (503
archive_unavailable) and nothing is deleted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.DeleteRunWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("delete run %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printLine(cmd.OutOrStdout(), resp.JSON200, "deleted "+strings.Join(resp.JSON200.Deleted, ", "))
		},
	}
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
