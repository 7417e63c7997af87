package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// capstan schedule create|list|get|pause|unpause|trigger|backfill|delete:
// the routes of schedules, .../schedules.

func newSchedule(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Create, show, pause, unpause, trigger, backfill and delete schedules of templates"}
	cmd.AddCommand(newScheduleCreate(g), newScheduleList(g), newScheduleGet(g),
		scheduleSignal(g, "pause", "Stop starting runs (the times while paused are not caught up)"),
		scheduleSignal(g, "unpause", "Start runs again from the next scheduled time"),
		newScheduleTrigger(g), newScheduleBackfill(g), newScheduleDelete(g))
	return cmd
}

func newScheduleCreate(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create each schedule of a file (YAML or JSON)",
		Long: `Create a schedule from a file (YAML or JSON), exactly one of cron and interval:

  name: nightly
  workflow: {name: report, version: 3}   # no version: the latest at each time
  params: {DAYS: 7}
  cron: "0 2 * * *"                      # or interval: 90s
  timezone: Europe/Berlin                # of cron; default UTC
  jitter: 10s
  overlap: skip                          # buffer_one, buffer_all, cancel_other, allow_all
  catchup_window: 1h                     # default one year
  paused: false

Params are JSON values of the template's types (7, not "7"). It prints
"schedule NAME created" with the next time. A file of several YAML documents
creates each in turn and stops at the first the API refuses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lintFile(file, kindSchedule); err != nil {
				return usageError{err}
			}
			docs, err := readDocuments[api.CreateScheduleRequest](file, "schedule")
			if err != nil {
				return usageError{err}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, doc := range docs {
				resp, err := c.CreateScheduleWithResponse(cmd.Context(), g.project, g.domain, doc)
				if err != nil {
					return fmt.Errorf("create schedule %s: %w", doc.Name, err)
				}
				s, err := answer(resp.JSON201, resp.StatusCode(), resp.Body)
				if err != nil {
					return err
				}
				if err := g.printLine(cmd.OutOrStdout(), s, "schedule "+s.Name+" created"+nextNote(s)); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "schedule file (required)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// nextNote says when s starts its next run: "; next run at T", or " (paused)".
func nextNote(s *api.Schedule) string {
	switch {
	case s.Paused:
		return " (paused)"
	case len(s.NextRunTimes) > 0:
		return "; next run at " + s.NextRunTimes[0].Local().Format(time.DateTime)
	}
	return ""
}

// cadence is s's cron (with its time zone) or interval.
func cadence(s api.Schedule) string {
	if s.Cron != nil {
		return fmt.Sprintf("cron %q %s", *s.Cron, nonEmpty(deref(s.Timezone), "UTC"))
	}
	return "every " + deref(s.Interval)
}

func newScheduleList(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List schedules by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListSchedulesWithResponse(cmd.Context(), g.project, g.domain, &api.ListSchedulesParams{Limit: &limit})
			if err != nil {
				return fmt.Errorf("list schedules of %s/%s: %w", g.project, g.domain, err)
			}
			list, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), list, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tWORKFLOW\tWHEN\tOVERLAP\tPAUSED\tNEXT RUN")
				for _, s := range list.Schedules {
					next := "-"
					if len(s.NextRunTimes) > 0 {
						next = s.NextRunTimes[0].Local().Format(time.DateTime)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\n", s.Name, refString(s.Workflow), cadence(s), s.Overlap, s.Paused, next)
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

// getSchedule reads the schedule name.
func getSchedule(ctx context.Context, c *api.ClientWithResponses, g *globals, name string) (*api.Schedule, error) {
	resp, err := c.GetScheduleWithResponse(ctx, g.project, g.domain, name)
	if err != nil {
		return nil, fmt.Errorf("get schedule %s: %w", name, err)
	}
	return answer(resp.JSON200, resp.StatusCode(), resp.Body)
}

func newScheduleGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a schedule: its next run times, recent runs and counters",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := getSchedule(cmd.Context(), c, g, args[0])
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), s, func(w io.Writer) { printSchedule(w, s) })
		},
	}
}

// printSchedule writes s as a heading, its counters, next run times and
// recent runs.
func printSchedule(w io.Writer, s *api.Schedule) {
	paused := ""
	if s.Paused {
		paused = "  (paused)"
	}
	fmt.Fprintf(w, "schedule %s  %s  %s%s\n", s.Name, refString(s.Workflow), cadence(*s), paused)
	fmt.Fprintf(w, "overlap %s  catchup_window %s  jitter %s\n", s.Overlap, s.CatchupWindow, nonEmpty(deref(s.Jitter), "0s"))
	if len(s.Params) > 0 {
		raw, _ := json.Marshal(s.Params) // decoded JSON: it encodes
		fmt.Fprintf(w, "params %s\n", raw)
	}
	fmt.Fprintf(w, "missed_catchup_window %d  skipped_overlap %d  buffered %d\n", s.MissedCatchupWindow, s.SkippedOverlap, s.Buffered)
	next := make([]string, len(s.NextRunTimes))
	for i, t := range s.NextRunTimes {
		next[i] = t.Local().Format(time.DateTime)
	}
	fmt.Fprintf(w, "next run times: %s\n", nonEmpty(strings.Join(next, ", "), "none"))
	fmt.Fprintln(w, "RECENT RUN\tSCHEDULED AT\tPHASE")
	for _, r := range s.RecentRuns {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, r.ScheduledAt.Local().Format(time.DateTime), r.Phase)
	}
}

// scheduleSignal is the pause or the unpause command (op).
func scheduleSignal(g *globals, op, short string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := signalSchedule(cmd.Context(), c, g, op, args[0])
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), s, "schedule "+s.Name+" "+op+"d"+nextNote(s))
		},
	}
}

// signalSchedule pauses (op "pause") or unpauses the schedule name and
// returns it as it is now.
func signalSchedule(ctx context.Context, c *api.ClientWithResponses, g *globals, op, name string) (*api.Schedule, error) {
	if op == "pause" {
		resp, err := c.PauseScheduleWithResponse(ctx, g.project, g.domain, name)
		if err != nil {
			return nil, fmt.Errorf("pause schedule %s: %w", name, err)
		}
		return answer(resp.JSON200, resp.StatusCode(), resp.Body)
	}
	resp, err := c.UnpauseScheduleWithResponse(ctx, g.project, g.domain, name)
	if err != nil {
		return nil, fmt.Errorf("unpause schedule %s: %w", name, err)
	}
	return answer(resp.JSON200, resp.StatusCode(), resp.Body)
}

// overlapFlag adds --overlap to cmd: the policy of the times a trigger or
// a backfill records, instead of the schedule's.
func overlapFlag(cmd *cobra.Command, p *api.OverlapPolicy) {
	enumFlag(cmd, p, overlapEnum, "policy", "overlap", "", "the overlap policy (default: the schedule's)")
}

// overlapPolicy is --overlap's value, nil when not given.
func overlapPolicy(p api.OverlapPolicy) *api.OverlapPolicy {
	if p == "" {
		return nil
	}
	return &p
}

func newScheduleTrigger(g *globals) *cobra.Command {
	var overlap api.OverlapPolicy
	cmd := &cobra.Command{
		Use:   "trigger NAME [--overlap POLICY]",
		Short: "Start a run of the schedule now (subject to the overlap policy)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.TriggerScheduleWithResponse(cmd.Context(), g.project, g.domain, args[0],
				api.TriggerScheduleRequest{Overlap: overlapPolicy(overlap)})
			if err != nil {
				return fmt.Errorf("trigger schedule %s: %w", args[0], err)
			}
			a, err := answer(resp.JSON202, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), a, "schedule "+args[0]+" triggered for "+timesNote(a.ScheduledTimes))
		},
	}
	overlapFlag(cmd, &overlap)
	return cmd
}

// timesNote is times as "T", or "N times, T1 to TN", or "no time".
func timesNote(times []time.Time) string {
	switch len(times) {
	case 0:
		return "no time"
	case 1:
		return times[0].UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%d times, %s to %s", len(times), times[0].UTC().Format(time.RFC3339), times[len(times)-1].UTC().Format(time.RFC3339))
}

func newScheduleBackfill(g *globals) *cobra.Command {
	var start, end string
	var overlap api.OverlapPolicy
	cmd := &cobra.Command{
		Use:   "backfill NAME --start TIME --end TIME [--overlap POLICY]",
		Short: "Start the runs of the schedule's times in [start, end] (RFC 3339 times, or dates at 00:00 UTC)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := api.BackfillRequest{}
			var err error
			if body.Start, err = flagTime("--start", start); err != nil {
				return err
			}
			if body.End, err = flagTime("--end", end); err != nil {
				return err
			}
			body.Overlap = overlapPolicy(overlap)
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.BackfillScheduleWithResponse(cmd.Context(), g.project, g.domain, args[0], body)
			if err != nil {
				return fmt.Errorf("backfill schedule %s: %w", args[0], err)
			}
			a, err := answer(resp.JSON202, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), a, "schedule "+args[0]+" backfilled: "+timesNote(a.ScheduledTimes))
		},
	}
	cmd.Flags().StringVar(&start, "start", "", "the first time, e.g. 2026-01-02T00:00:00Z (required)")
	cmd.Flags().StringVar(&end, "end", "", "the last time, included (required)")
	overlapFlag(cmd, &overlap)
	_ = cmd.MarkFlagRequired("start")
	_ = cmd.MarkFlagRequired("end")
	return cmd
}

// flagTime parses the value of flag: an RFC 3339 time, or a date
// (2006-01-02) at 00:00 UTC; anything else is a usage error.
func flagTime(flag, v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02)", flag, v)
}

func newScheduleDelete(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule; the runs it started stay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.DeleteScheduleWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("delete schedule %s: %w", args[0], err)
			}
			if err := deleted(resp.StatusCode(), resp.Body); err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), map[string]string{"deleted": args[0]}, "schedule "+args[0]+" deleted")
		},
	}
}
