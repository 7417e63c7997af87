package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func newConcurrency(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "concurrency", Short: "Show the project/domain's concurrency slots: who holds them, who waits"}
	cmd.AddCommand(newConcurrencyList(g))
	return cmd
}

func newConcurrencyList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List each concurrency key a run or task holds or waits for, with its holders and first waiters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetConcurrencyWithResponse(cmd.Context(), g.project, g.domain)
			if err != nil {
				return fmt.Errorf("read the concurrency ledger of %s/%s: %w", g.project, g.domain, err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printOut(cmd.OutOrStdout(), resp.JSON200, func(w io.Writer) {
				fmt.Fprintln(w, "KIND\tKEY\tHELD\tWAITING\tHOLDERS\tNEXT")
				for _, k := range resp.JSON200.Keys {
					var holders, next []string
					for _, h := range k.Holders {
						name := slotName(h.Run, h.Action, h.Task)
						if h.Stopping != nil && *h.Stopping {
							name += " (stopping)"
						}
						holders = append(holders, name)
					}
					for _, w := range k.Waiters[:min(len(k.Waiters), 3)] {
						next = append(next, slotName(w.Run, w.Action, w.Task))
					}
					fmt.Fprintf(w, "%s\t%q\t%d/%d\t%d\t%s\t%s\n", k.Kind, k.Key, len(k.Holders), k.Max, k.Waiting,
						nonEmpty(strings.Join(holders, ", "), "-"), nonEmpty(strings.Join(next, ", "), "-"))
				}
			})
		},
	}
}

// slotName names a slot's holder or waiter: its run, or for a task key
// run/step[index].
func slotName(run string, action *string, task *int) string {
	if action == nil {
		return run
	}
	if task == nil {
		return run + "/" + *action
	}
	return fmt.Sprintf("%s/%s[%d]", run, *action, *task)
}
