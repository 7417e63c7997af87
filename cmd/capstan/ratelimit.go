package main

import (
	"fmt"
	"io"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/spf13/cobra"
)

// capstan rate-limit put|list|get|delete: a project's rate limits,
// /v1/projects/{p}/rate-limits (the domain flag is not read).

func newRateLimit(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "rate-limit",
		Short: "Put, list, show and delete a project's rate limits: token buckets steps' tasks take tokens of"}
	cmd.AddCommand(newRateLimitPut(g), newRateLimitList(g), newRateLimitGet(g), newRateLimitDelete(g))
	return cmd
}

func newRateLimitPut(g *globals) *cobra.Command {
	var limit int
	var per string
	cmd := &cobra.Command{
		Use:   "put NAME --limit N --per 1s|1m|1h",
		Short: "Create or replace a rate limit of N tokens per period",
		Long: `Create or replace a rate limit of the project: a token bucket of capacity
--limit, refilled continuously at --limit tokens per --per (1s, 1m or 1h).
A step takes it with rate_limits: [{name: NAME, units: 1, key: CEL}]. It
prints "rate limit NAME created" (or "replaced").`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !domain.ValidName(name) {
				return usagef("NAME: must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit; got %q", name)
			}
			if _, errs := domain.ValidateRateLimit(limit, per); len(errs) > 0 {
				return usagef("--%s: %s", errs[0].Field, errs[0].Message)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.PutRateLimitWithResponse(cmd.Context(), g.project, name, api.RateLimitRequest{Limit: &limit, Per: &per})
			if err != nil {
				return fmt.Errorf("put rate limit %s: %w", name, err)
			}
			r, verb := resp.JSON201, "created"
			if r == nil && resp.JSON200 != nil {
				r, verb = resp.JSON200, "replaced"
			}
			r, err = answer(r, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			line := fmt.Sprintf("rate limit %s %s: %d per %s", r.Name, verb, r.Limit, r.Per)
			return g.printLine(cmd.OutOrStdout(), r, line)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "tokens per period, 1 to 1000000 (required)")
	cmd.Flags().StringVar(&per, "per", "", "the period: 1s, 1m or 1h (required)")
	_ = cmd.MarkFlagRequired("limit")
	_ = cmd.MarkFlagRequired("per")
	return cmd
}

func newRateLimitList(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the project's rate limits by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListRateLimitsWithResponse(cmd.Context(), g.project, &api.ListRateLimitsParams{Limit: &limit})
			if err != nil {
				return fmt.Errorf("list rate limits of %s: %w", g.project, err)
			}
			list, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), list, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tLIMIT\tPER\tUPDATED")
				for _, r := range list.RateLimits {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", r.Name, r.Limit, r.Per, r.UpdatedAt.Local().Format(time.DateTime))
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

func newRateLimitGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a rate limit as YAML (-o json: JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetRateLimitWithResponse(cmd.Context(), g.project, args[0])
			if err != nil {
				return fmt.Errorf("get rate limit %s: %w", args[0], err)
			}
			r, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printDocument(cmd.OutOrStdout(), r)
		},
	}
}

func newRateLimitDelete(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a rate limit; tasks that take it wait until it is put again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.DeleteRateLimitWithResponse(cmd.Context(), g.project, args[0])
			if err != nil {
				return fmt.Errorf("delete rate limit %s: %w", args[0], err)
			}
			if err := deleted(resp.StatusCode(), resp.Body); err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), map[string]string{"deleted": args[0]}, "rate limit "+args[0]+" deleted")
		},
	}
}
