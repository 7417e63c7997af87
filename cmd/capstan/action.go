package main

import (
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
	return &cobra.Command{
		Use:   "get RUN ACTION",
		Short: "Show an action with its tasks and their attempts",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetActionWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1])
			if err != nil {
				return err
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			a := resp.JSON200
			return g.printOut(cmd.OutOrStdout(), a, func(w io.Writer) {
				printRun(w, &api.Run{Project: g.project, Domain: g.domain, Name: args[0] + " action " + a.Name,
					Phase: a.Phase, Actions: []api.Action{*a}})
			})
		},
	}
}

func newActionAbort(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "abort RUN ACTION",
		Short: "Abort one action and everything under it (delivery is asynchronous and reliable)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			body := api.AbortRequest{}
			if reason != "" {
				body.Reason = &reason
			}
			resp, err := c.AbortActionWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1], body)
			if err != nil {
				return err
			}
			if resp.JSON202 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printLine(cmd.OutOrStdout(), resp.JSON202,
				fmt.Sprintf("abort of %s/%s accepted (phase %s)", args[0], args[1], resp.JSON202.Phase))
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why (default "User requested abort")`)
	return cmd
}
