package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

func newLogs(g *globals) *cobra.Command {
	var task, attempt, generation int
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs RUN ACTION",
		Short: "Print an attempt's stdout (and stderr to stderr); -f follows them until the attempt ends",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			params := &api.GetAttemptLogsParams{}
			if generation >= 0 {
				params.Generation = &generation
			}
			if attempt == 0 {
				if attempt, err = latestAttempt(cmd.Context(), c, g, args[0], args[1], task, generation); err != nil {
					return err
				}
				if attempt == 0 {
					return fmt.Errorf("action %s has no attempt for task %d yet", args[1], task)
				}
			}
			if follow {
				f := &logFollower{c: c, project: g.project, domain: g.domain, run: args[0], action: args[1], task: task,
					attempt: attempt, params: *params, stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr()}
				return f.follow(cmd.Context())
			}
			resp, err := c.GetAttemptLogsWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1], task, attempt, params)
			if err != nil {
				return fmt.Errorf("get logs of attempt %d of task %d of %s/%s: %w", attempt, task, args[0], args[1], err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			if g.output != outTable {
				return g.printOut(cmd.OutOrStdout(), resp.JSON200, nil)
			}
			fmt.Fprint(cmd.OutOrStdout(), resp.JSON200.Stdout)
			fmt.Fprint(cmd.ErrOrStderr(), resp.JSON200.Stderr)
			return nil
		},
	}
	cmd.Flags().IntVar(&task, "task", 0, "task (replica) index")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output while the attempt runs, until it ends")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "attempt number (default: the latest)")
	cmd.Flags().IntVar(&generation, "generation", -1, "the step's generation (a retry or a restart starts the next; default: the current)")
	return cmd
}

// latestAttempt is the number of the latest attempt of task idx of action
// name of run in generation (-1: the action's current one), or 0 when it
// has none: it reads the action's pages of tasks until it meets the task.
func latestAttempt(ctx context.Context, c *api.ClientWithResponses, g *globals, run, name string, idx, generation int) (
	int, error) {
	params := &api.GetActionParams{Limit: ptr(500)}
	for {
		resp, err := c.GetActionWithResponse(ctx, g.project, g.domain, run, name, params)
		if err != nil {
			return 0, fmt.Errorf("get action %s of run %s: %w", name, run, err)
		}
		a := resp.JSON200
		if a == nil {
			return 0, apiError(resp.StatusCode(), resp.Body)
		}
		if generation < 0 {
			generation = deref(a.Generation)
		}
		for _, t := range a.Tasks {
			if t.Index == idx && deref(t.Generation) == generation {
				return len(t.Attempts), nil
			}
		}
		if a.TasksNextCursor == nil {
			return 0, nil
		}
		params.Cursor = a.TasksNextCursor
	}
}

// ptr is a pointer to v.
func ptr[T any](v T) *T { return &v }

// deref is *p, or T's zero value when p is nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func newWorkers(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "workers",
		Short: "List registered workers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListWorkersWithResponse(cmd.Context())
			if err != nil {
				return fmt.Errorf("list workers: %w", err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printOut(cmd.OutOrStdout(), resp.JSON200, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tNAME\tSTATE\tSLOTS\tFREE\tFAILURES\tHEARTBEAT\tSANDBOX\tADDRESS")
				for _, x := range resp.JSON200.Workers {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", x.Id, x.Name, workerState(x), x.Slots,
						deref(x.FreeSlots), len(x.Failures), heartbeatAge(x), x.Sandbox, x.Address)
				}
			})
		},
	}
}

// heartbeatAge is how long ago the worker last heartbeat, e.g. "2s ago".
func heartbeatAge(w api.Worker) string {
	if w.LastHeartbeatAt.IsZero() {
		return "-"
	}
	return time.Since(w.LastHeartbeatAt).Round(time.Second).String() + " ago"
}

// workerState is the worker's state, noting a drain or a failure backoff.
func workerState(w api.Worker) string {
	st := string(w.State)
	if w.Draining {
		st += ",draining"
	}
	if w.PlaceableAfter != nil && time.Until(*w.PlaceableAfter) > 0 {
		st += ",backoff " + time.Until(*w.PlaceableAfter).Round(time.Second).String()
	}
	return st
}
