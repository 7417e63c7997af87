package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

func newList(g *globals) *cobra.Command {
	var phase api.Phase
	var limit int
	var watch bool
	cmd := &cobra.Command{
		Use:   "list [--phase PHASE] [-w]",
		Short: "List runs, newest first; -w then prints a line per run whose phase changes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			params := &api.ListRunsParams{Limit: &limit}
			if phase != "" {
				params.Phase = &phase
			}
			resp, err := c.ListRunsWithResponse(cmd.Context(), g.project, g.domain, params)
			if err != nil {
				return err
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			out := cmd.OutOrStdout()
			if err := g.printOut(out, resp.JSON200, func(w io.Writer) {
				fmt.Fprintln(w, "RUN\tPHASE\tCREATED")
				for _, r := range resp.JSON200.Runs {
					fmt.Fprintln(w, runRow(r.Name, r.Phase, r.CreatedAt))
				}
			}); err != nil || !watch {
				return err
			}
			seen := map[string]api.Phase{}
			for _, r := range resp.JSON200.Runs {
				seen[r.Name] = r.Phase
			}
			return watchList(cmd.Context(), c, g, out, phase, seen)
		},
	}
	enumFlag(cmd, &phase, phaseEnum, "phase", "phase", "", "only runs in this phase")
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "then print each run whose phase changes, until interrupted")
	return cmd
}

// runRow is a run's line of the list table.
func runRow(name string, phase api.Phase, created time.Time) string {
	return fmt.Sprintf("%s\t%s\t%s", name, phase, created.Local().Format(time.DateTime))
}

// watchList follows the project's events and prints each run (in phase,
// when it is set) whose phase differs from what seen holds.
func watchList(ctx context.Context, c *api.ClientWithResponses, g *globals, out io.Writer, phase api.Phase,
	seen map[string]api.Phase) error {
	var werr error
	err := followEvents(ctx, c, g, "", func(ev sseEvent) bool {
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
		werr = g.printLine(out, r, fmt.Sprintf("%-30s %-22s %s", r.Name, r.Phase, r.CreatedAt.Local().Format(time.DateTime)))
		return werr != nil
	})
	if werr != nil {
		return werr
	}
	return err
}
