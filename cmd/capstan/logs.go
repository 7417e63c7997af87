package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

func newLogs(g *globals) *cobra.Command {
	var task, attempt int
	cmd := &cobra.Command{
		Use:   "logs RUN ACTION",
		Short: "Print an attempt's captured stdout (and stderr to stderr)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if attempt == 0 {
				run, err := getRun(cmd.Context(), c, g, args[0])
				if err != nil {
					return err
				}
				for _, a := range run.Actions {
					if a.Name == args[1] && task < len(a.Tasks) {
						attempt = len(a.Tasks[task].Attempts)
					}
				}
				if attempt == 0 {
					return fmt.Errorf("action %s has no attempt for task %d yet", args[1], task)
				}
			}
			resp, err := c.GetAttemptLogsWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1], task, attempt)
			if err != nil {
				return err
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Print(resp.JSON200.Stdout)
			fmt.Fprint(os.Stderr, resp.JSON200.Stderr)
			return nil
		},
	}
	cmd.Flags().IntVar(&task, "task", 0, "task (replica) index")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "attempt number (default: the latest)")
	return cmd
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
				return err
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tSTATE\tSLOTS\tFREE\tFAILURES\tADDRESS")
			for _, x := range resp.JSON200.Workers {
				free := 0
				if x.FreeSlots != nil {
					free = *x.FreeSlots
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", x.Id, x.Name, workerState(x), x.Slots, free,
					len(x.Failures), x.Address)
			}
			return w.Flush()
		},
	}
}

// workerState is the worker's state, noting a drain or a failure backoff.
func workerState(w api.Worker) string {
	st := w.State
	if w.Draining {
		st += ",draining"
	}
	if w.PlaceableAfter != nil && time.Until(*w.PlaceableAfter) > 0 {
		st += ",backoff " + time.Until(*w.PlaceableAfter).Round(time.Second).String()
	}
	return st
}
