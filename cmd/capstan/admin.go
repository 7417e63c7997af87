package main

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/spf13/cobra"
)

func newAborts(g *globals) *cobra.Command {
	var state api.ListAbortsParamsState
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
				params.State = &state
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
	enumFlag(cmd, &state, abortStateEnum, "state", "state", "", "only aborts in this state (default: all)")
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

func newCache(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cache", Short: "List or delete the project/domain's cache entries"}
	cmd.AddCommand(newCacheList(g), newCacheDelete(g))
	return cmd
}

// cacheFilter is the flags of the cache routes' filters (the list's and
// the bulk delete's query parameters).
type cacheFilter struct{ version, run, step, createdBefore string }

func (f *cacheFilter) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.version, "version", "", "only the entries of this cache version (a step's cache.version)")
	cmd.Flags().StringVar(&f.run, "run", "", "only the entries this run wrote")
	cmd.Flags().StringVar(&f.step, "step", "", "only the entries this step wrote")
	cmd.Flags().StringVar(&f.createdBefore, "created-before", "",
		"only the entries written before this RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
}

// set reports whether any filter flag is set.
func (f *cacheFilter) set() bool {
	return f.version != "" || f.run != "" || f.step != "" || f.createdBefore != ""
}

// params checks the flags and returns them as the bulk delete's query
// parameters (nil: not set); a bad one is a usage error naming its flag.
func (f *cacheFilter) params() (api.DeleteCacheEntriesParams, error) {
	var p api.DeleteCacheEntriesParams
	if f.version != "" {
		if !domain.ValidCacheVersion(f.version) {
			return p, usagef("--version: must be 1-63 characters of [A-Za-z0-9._-], e.g. v1; got %q", f.version)
		}
		p.Version = &f.version
	}
	for _, n := range []struct {
		flag, value string
		to          **string
	}{{"run", f.run, &p.Run}, {"step", f.step, &p.Step}} {
		if n.value == "" {
			continue
		}
		if !domain.ValidName(n.value) {
			return p, usagef("--%s: must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit; got %q",
				n.flag, n.value)
		}
		*n.to = &n.value
	}
	if f.createdBefore != "" {
		at, err := time.Parse(time.RFC3339, f.createdBefore)
		if err != nil {
			return p, usagef("--created-before: must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z; got %q", f.createdBefore)
		}
		p.CreatedBefore = &at
	}
	return p, nil
}

func newCacheList(g *globals) *cobra.Command {
	var limit int
	var filter cacheFilter
	cmd := &cobra.Command{
		Use:   "list [--version V] [--run RUN] [--step STEP] [--created-before TIME]",
		Short: "List cache entries, newest first; the filters narrow the list",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := filter.params()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListCacheEntriesWithResponse(cmd.Context(), g.project, g.domain, &api.ListCacheEntriesParams{
				Version: p.Version, Run: p.Run, Step: p.Step, CreatedBefore: p.CreatedBefore, Limit: &limit})
			if err != nil {
				return fmt.Errorf("list cache entries of %s/%s: %w", g.project, g.domain, err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			return g.printOut(cmd.OutOrStdout(), resp.JSON200, func(w io.Writer) {
				fmt.Fprintln(w, "KEY\tVERSION\tRUN\tSTEP\tOUTPUTS\tCREATED\tEXPIRES\tRESERVED BY")
				for _, e := range resp.JSON200.Entries {
					owner, expires := "-", "never"
					if e.Reservation != nil {
						owner = e.Reservation.Owner
					}
					if e.ExpiresAt != nil {
						expires = e.ExpiresAt.Local().Format(time.DateTime)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Key, e.Version, nonEmpty(deref(e.Run), "-"),
						nonEmpty(deref(e.Step), "-"), len(e.Outputs), e.CreatedAt.Local().Format(time.DateTime), expires, owner)
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	filter.addFlags(cmd)
	return cmd
}

func newCacheDelete(g *globals) *cobra.Command {
	var filter cacheFilter
	var all bool
	cmd := &cobra.Command{
		Use:   "delete KEY | delete [--version V] [--run RUN] [--step STEP] [--created-before TIME] | delete --all",
		Short: "Delete a cache entry, every entry the filters select, or --all: the next run of their steps executes again",
		Long: `Delete one cache entry by KEY, or every entry of the project/domain that
the filter flags select (they combine: --version v1 --step build deletes
the v1 entries of step build), or --all of them. It prints how many it
deleted. The next run of a deleted entry's step executes again.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if filter.set() || all {
					return usagef("KEY: deletes one entry; drop KEY to delete what --version, --run, --step, --created-before or --all select")
				}
				return deleteCacheEntry(cmd, g, args[0])
			}
			if !filter.set() && !all {
				return usagef("--all: give KEY, a filter (--version, --run, --step, --created-before), or --all to delete every entry of %s/%s",
					g.project, g.domain)
			}
			if filter.set() && all {
				return usagef("--all: deletes every entry; drop it to delete only what the filters select")
			}
			p, err := filter.params()
			if err != nil {
				return err
			}
			if all {
				p.All = &all
			}
			return deleteCacheEntries(cmd, g, p)
		},
	}
	filter.addFlags(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "delete every entry of the project/domain")
	return cmd
}

// deleteCacheEntry deletes the entry of key and prints a line.
func deleteCacheEntry(cmd *cobra.Command, g *globals, key string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	resp, err := c.DeleteCacheEntryWithResponse(cmd.Context(), g.project, g.domain, key)
	if err != nil {
		return fmt.Errorf("delete cache entry %q: %w", key, err)
	}
	if resp.StatusCode() != http.StatusNoContent && resp.StatusCode() != http.StatusOK {
		return apiError(resp.StatusCode(), resp.Body)
	}
	return g.printLine(cmd.OutOrStdout(), map[string]string{"deleted": key}, "cache entry "+key+" deleted")
}

// deleteCacheEntries deletes the entries p selects and prints how many.
func deleteCacheEntries(cmd *cobra.Command, g *globals, p api.DeleteCacheEntriesParams) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	resp, err := c.DeleteCacheEntriesWithResponse(cmd.Context(), g.project, g.domain, &p)
	if err != nil {
		return fmt.Errorf("delete cache entries of %s/%s: %w", g.project, g.domain, err)
	}
	if resp.JSON200 == nil {
		return apiError(resp.StatusCode(), resp.Body)
	}
	return g.printLine(cmd.OutOrStdout(), resp.JSON200, fmt.Sprintf("%d cache entries deleted from %s/%s",
		resp.JSON200.Deleted, g.project, g.domain))
}
