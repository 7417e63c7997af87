package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// Output formats only run list takes, besides table, json and yaml.
const (
	outName  = "name"
	outWide  = "wide"
	outJSONL = "jsonl"
)

// listOpts are run list's flags.
type listOpts struct {
	phase        api.Phase
	name         string
	since, until string
	all, watch   bool
	limit        int
}

func newList(g *globals) *cobra.Command {
	var o listOpts
	cmd := &cobra.Command{
		Use:   "list [--phase PHASE] [--name TEXT] [--since WHEN] [--until WHEN] [--all] [-w]",
		Short: "List runs, newest first; -w then prints a line per run whose phase changes",
		Long: `List runs, newest first: a page of --limit, or with --all every page (the
API's cursors followed). --phase and --name (runs whose name contains TEXT)
filter on the server. --since and --until filter on the client, by when a
run was created: a duration back from now (90m, 24h) or an RFC 3339 time;
with --since, pages are followed until the first run created before it.

-o name prints the names, -o wide more columns, -o jsonl a JSON object per
run and line, -o json and -o yaml the list as the API answers it.`,
		Annotations: map[string]string{outputsAnnotation: strings.Join([]string{outName, outWide, outJSONL}, ",")},
		Args:        cobra.NoArgs,
		RunE:        func(cmd *cobra.Command, _ []string) error { return o.run(cmd, g) },
	}
	enumFlag(cmd, &o.phase, phaseEnum, "phase", "phase", "", "only runs in this phase")
	cmd.Flags().StringVar(&o.name, "name", "", "only runs whose name contains this text (lower-case letters, digits, dashes)")
	cmd.Flags().StringVar(&o.since, "since", "", "only runs created since: a duration back from now (24h) or an RFC 3339 time")
	cmd.Flags().StringVar(&o.until, "until", "", "only runs created before: a duration back from now or an RFC 3339 time")
	cmd.Flags().BoolVar(&o.all, "all", false, "follow the API's cursors: every page, not only the first")
	cmd.Flags().IntVar(&o.limit, "limit", 50, "page size")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "then print each run whose phase changes, until interrupted")
	return cmd
}

func (o listOpts) run(cmd *cobra.Command, g *globals) error {
	now := time.Now()
	since, err := flagWhen("--since", o.since, now)
	if err != nil {
		return err
	}
	until, err := flagWhen("--until", o.until, now)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	// With -w the project's stream opens from now before the list is read:
	// a change after the list is then an event, and none of the project's
	// history is replayed.
	var stream *http.Response
	if o.watch {
		if stream, err = openEvents(cmd.Context(), c, g, "", "", true); err != nil {
			return err
		}
		defer stream.Body.Close()
	}
	list, err := o.fetch(cmd.Context(), c, g, since, until)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if err := printRuns(g, out, list, now); err != nil || !o.watch {
		return err
	}
	seen := map[string]api.Phase{}
	for _, r := range list.Runs {
		seen[r.Name] = r.Phase
	}
	return watchList(cmd.Context(), c, g, out, o.phase, seen, stream)
}

// fetch reads the runs the flags select: the first page, or every page
// with --all or --since (stopping at the first run created before since),
// less those created outside [since, until).
func (o listOpts) fetch(ctx context.Context, c *api.ClientWithResponses, g *globals, since, until time.Time) (*api.RunList, error) {
	params := &api.ListRunsParams{Limit: &o.limit}
	if o.phase != "" {
		params.Phase = &o.phase
	}
	if o.name != "" {
		params.NameContains = &o.name
	}
	out := &api.RunList{Runs: []api.RunSummary{}}
	for {
		resp, err := c.ListRunsWithResponse(ctx, g.project, g.domain, params)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		if resp.JSON200 == nil {
			return nil, apiError(resp.StatusCode(), resp.Body)
		}
		page := resp.JSON200
		older := false
		for _, r := range page.Runs {
			switch {
			case !since.IsZero() && r.CreatedAt.Before(since):
				older = true
			case until.IsZero() || r.CreatedAt.Before(until):
				out.Runs = append(out.Runs, r)
			}
		}
		out.NextCursor = page.NextCursor
		if older || page.NextCursor == nil || !o.all && since.IsZero() {
			if older {
				out.NextCursor = nil
			}
			return out, nil
		}
		params.Cursor = page.NextCursor
	}
}

// flagWhen parses a --since or --until value: a duration back from now or
// an RFC 3339 time; "" is the zero time.
func flagWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("%s %q: want a duration back from now (24h) or an RFC 3339 time (2026-01-02T15:04:05Z)", flag, s)
}

// printRuns writes list as -o asks.
func printRuns(g *globals, out io.Writer, list *api.RunList, now time.Time) error {
	switch g.output {
	case outName:
		for _, r := range list.Runs {
			if _, err := fmt.Fprintln(out, r.Name); err != nil {
				return err
			}
		}
		return nil
	case outJSONL:
		enc := json.NewEncoder(out)
		for _, r := range list.Runs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	wide := g.output == outWide
	return g.printOut(out, list, func(w io.Writer) {
		head := "RUN\tPHASE\tDURATION\tAGE\tMESSAGE"
		if wide {
			head += "\tWORKFLOW\tORIGIN\tCREATED"
		}
		fmt.Fprintln(w, head)
		for _, r := range list.Runs {
			fmt.Fprintln(w, runRow(r, now, wide))
		}
	})
}

// runRow is a run's line of the list table: RUN PHASE DURATION AGE
// MESSAGE, and with wide WORKFLOW ORIGIN CREATED.
func runRow(r api.RunSummary, now time.Time, wide bool) string {
	end := now
	if r.EndedAt != nil {
		end = *r.EndedAt
	}
	row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.Name, r.Phase, shortDuration(end.Sub(r.CreatedAt)),
		shortDuration(now.Sub(r.CreatedAt)), nonEmpty(oneLine(deref(r.PendingReason)), "-"))
	if !wide {
		return row
	}
	workflow := "-"
	if r.Workflow != nil {
		workflow = fmt.Sprintf("%s@%d", r.Workflow.Name, r.Workflow.Version)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s", row, workflow, summaryOrigin(r), r.CreatedAt.Local().Format(time.DateTime))
}

// summaryOrigin is what started a run: "schedule S", "trigger T", "parent
// RUN/STEP", or "-".
func summaryOrigin(r api.RunSummary) string {
	switch {
	case r.Schedule != nil:
		return "schedule " + *r.Schedule
	case r.Trigger != nil:
		return "trigger " + *r.Trigger
	case r.Parent != nil:
		return "parent " + r.Parent.Run + "/" + r.Parent.Action
	}
	return "-"
}

// shortDuration writes d as kubectl's AGE does: 45s, 12m, 3h4m, 2d5h.
func shortDuration(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// watchList follows the project's events, from stream (openEvents' answer
// from now), and prints each run (in phase, when it is set) whose phase
// differs from what seen holds.
func watchList(ctx context.Context, c *api.ClientWithResponses, g *globals, out io.Writer, phase api.Phase,
	seen map[string]api.Phase, stream *http.Response) error {
	var werr error
	err := followEvents(ctx, c, g, "", stream, func(ev sseEvent) bool {
		var e api.RunEvent
		if jsonErr := decodeEvent(ev, &e); jsonErr != nil || e.Run == "" {
			return false
		}
		r, err := getRun(ctx, c, g, e.Run)
		if err != nil {
			werr = err
			return true
		}
		if seen[r.Name] == r.Phase || phase != "" && r.Phase != phase {
			return false
		}
		seen[r.Name] = r.Phase
		line := fmt.Sprintf("%-30s %-22s %s", r.Name, r.Phase, r.CreatedAt.Local().Format(time.DateTime))
		if g.output == outName {
			line = r.Name
		}
		werr = g.printLine(out, r, line)
		return werr != nil
	})
	if werr != nil {
		return werr
	}
	return err
}
