package main

import (
	"fmt"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// capstan fair-share get|set: the route /v1/projects/{p}/fair-share of the
// project (--project or the config's).

func newFairShare(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "fair-share", Short: "Show or set the project's fair-share weight"}
	cmd.AddCommand(newFairShareGet(g), newFairShareSet(g))
	return cmd
}

func newFairShareGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Show the project's fair-share weight (1 until set)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetFairShareWithResponse(cmd.Context(), g.project)
			if err != nil {
				return fmt.Errorf("get fair share of %s: %w", g.project, err)
			}
			fs, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), fs, fmt.Sprintf("project %s weight %d", g.project, fs.Weight))
		},
	}
}

func newFairShareSet(g *globals) *cobra.Command {
	var weight int
	cmd := &cobra.Command{
		Use:   "set --weight N",
		Short: "Set the project's fair-share weight, 1..1000 (admin)",
		Long: `Set the project's fair-share weight, 1..1000 (an admin token). Within a
priority band, placement interleaves projects by their tasks running per
weight: a project of weight 2 takes about twice the slots of one of weight 1
while both have tasks waiting.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.SetFairShareWithResponse(cmd.Context(), g.project, api.FairShare{Weight: weight})
			if err != nil {
				return fmt.Errorf("set fair share of %s: %w", g.project, err)
			}
			fs, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), fs, fmt.Sprintf("project %s weight set to %d", g.project, fs.Weight))
		},
	}
	cmd.Flags().IntVar(&weight, "weight", 0, "the weight, 1..1000 (required)")
	_ = cmd.MarkFlagRequired("weight")
	return cmd
}
