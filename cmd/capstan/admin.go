package main

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

func newAborts(g *globals) *cobra.Command {
	var state string
	var limit int
	cmd := &cobra.Command{
		Use:   "aborts [--state pending|delivered|needs_intervention]",
		Short: "List aborts and attempt kills, most recently updated first (needs_intervention: what an operator must check)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			params := &api.ListAbortsParams{Limit: &limit}
			if state != "" {
				s := api.ListAbortsParamsState(state)
				params.State = &s
			}
			resp, err := c.ListAbortsWithResponse(cmd.Context(), params)
			if err != nil {
				return fmt.Errorf("list aborts: %w", err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printOut(cmd.OutOrStdout(), resp.JSON200, func(w io.Writer) {
				fmt.Fprintln(w, "RUN\tACTION\tKIND\tATTEMPTS\tOUTCOME\tCAUSE\tUPDATED")
				for _, a := range resp.JSON200.Aborts {
					fmt.Fprintf(w, "%s/%s/%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.Project, a.Domain, a.Run, a.Action, a.Kind,
						a.AttemptCount, nonEmpty(deref(a.Outcome), "pending"), a.Cause, a.UpdatedAt.Local().Format(time.DateTime))
				}
			})
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "pending, delivered or needs_intervention (default: all)")
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

func newCache(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cache", Short: "List or delete the project/domain's cache entries"}
	cmd.AddCommand(newCacheList(g), newCacheDelete(g))
	return cmd
}

func newCacheList(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List cache entries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListCacheEntriesWithResponse(cmd.Context(), g.project, g.domain, &api.ListCacheEntriesParams{Limit: &limit})
			if err != nil {
				return fmt.Errorf("list cache entries of %s/%s: %w", g.project, g.domain, err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printOut(cmd.OutOrStdout(), resp.JSON200, func(w io.Writer) {
				fmt.Fprintln(w, "KEY\tVERSION\tRUN\tSTEP\tOUTPUTS\tCREATED\tRESERVED BY")
				for _, e := range resp.JSON200.Entries {
					owner := "-"
					if e.Reservation != nil {
						owner = e.Reservation.Owner
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Key, e.Version, nonEmpty(deref(e.Run), "-"),
						nonEmpty(deref(e.Step), "-"), len(e.Outputs), e.CreatedAt.Local().Format(time.DateTime), owner)
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

func newCacheDelete(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete KEY",
		Short: "Delete a cache entry: the next run of its step executes again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.DeleteCacheEntryWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("delete cache entry %q: %w", args[0], err)
			}
			if resp.StatusCode() != http.StatusNoContent && resp.StatusCode() != http.StatusOK {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printLine(cmd.OutOrStdout(), map[string]string{"deleted": args[0]}, "cache entry "+args[0]+" deleted")
		},
	}
}
