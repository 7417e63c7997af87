package main

import (
	"context"
	"fmt"
	"io"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

func newAction(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "action", Short: "Show or abort one action (step) of a run"}
	cmd.AddCommand(newActionGet(g), newActionAbort(g))
	return cmd
}

func newActionGet(g *globals) *cobra.Command {
	var cursor string
	var limit int
	cmd := &cobra.Command{
		Use:   "get RUN ACTION",
		Short: "Show an action with a page of its tasks and their attempts (--cursor pages on)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			params := &api.GetActionParams{}
			if cursor != "" {
				params.Cursor = &cursor
			}
			if limit != 0 {
				params.Limit = &limit
			}
			resp, err := c.GetActionWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1], params)
			if err != nil {
				return fmt.Errorf("get action %s of run %s: %w", args[1], args[0], err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			a := resp.JSON200
			return g.printOut(cmd.OutOrStdout(), a, func(w io.Writer) { printTasks(w, args[0], a) })
		},
	}
	cmd.Flags().StringVar(&cursor, "cursor", "", "the page after this cursor (the tasks_next_cursor of the previous page)")
	cmd.Flags().IntVar(&limit, "limit", 0, "tasks a page, 1 to 500 (default: the API's, 100)")
	return cmd
}

func newActionAbort(g *globals) *cobra.Command {
	return abortCommand(g, "abort RUN ACTION",
		"Abort one action and everything under it (delivery is asynchronous and reliable)", 2,
		func(ctx context.Context, c *api.ClientWithResponses, args []string, body api.AbortRequest) (*api.Action, int, []byte, error) {
			resp, err := c.AbortActionWithResponse(ctx, g.project, g.domain, args[0], args[1], body)
			if err != nil {
				return nil, 0, nil, fmt.Errorf("abort action %s of run %s: %w", args[1], args[0], err)
			}
			return resp.JSON202, resp.StatusCode(), resp.Body, nil
		})
}
