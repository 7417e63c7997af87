package main

import (
	"fmt"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// decideFlags are approve's and reject's flags.
type decideFlags struct {
	comment, by string
}

func (f *decideFlags) body() api.ApprovalRequest {
	var b api.ApprovalRequest
	if f.comment != "" {
		b.Comment = &f.comment
	}
	if f.by != "" {
		b.By = &f.by
	}
	return b
}

func (f *decideFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.comment, "comment", "", "why, shown with the decision")
	cmd.Flags().StringVar(&f.by, "by", "", "a label for who decides, shown with the decision (the decision is recorded as your token's)")
}

func newApprove(g *globals) *cobra.Command {
	var f decideFlags
	cmd := &cobra.Command{
		Use:   "approve RUN STEP [--comment C] [--by B]",
		Short: "Approve an approval step that waits; the run goes on",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ApproveActionWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1], f.body())
			if err != nil {
				return fmt.Errorf("approve step %s of run %s: %w", args[1], args[0], err)
			}
			if resp.JSON202 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "step %s of %s approved\n", args[1], args[0])
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newReject(g *globals) *cobra.Command {
	var f decideFlags
	cmd := &cobra.Command{
		Use:   "reject RUN STEP [--comment C] [--by B]",
		Short: "Reject an approval step that waits; the step fails with reason rejected",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.RejectActionWithResponse(cmd.Context(), g.project, g.domain, args[0], args[1], f.body())
			if err != nil {
				return fmt.Errorf("reject step %s of run %s: %w", args[1], args[0], err)
			}
			if resp.JSON202 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "step %s of %s rejected\n", args[1], args[0])
			return nil
		},
	}
	f.register(cmd)
	return cmd
}
