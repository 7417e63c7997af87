package main

import (
	"fmt"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// capstan settings get|set: the route /v1/projects/{p}/settings of the
// project (--project or the config's).

func newSettings(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "settings", Short: "Show or set the project's settings (retention)"}
	cmd.AddCommand(newSettingsGet(g), newSettingsSet(g))
	return cmd
}

// retentionLine is settings' one-line form, e.g. "project demo retention
// after_success 2s, after_failure 720h" ("server defaults" when unset).
func retentionLine(project string, s api.ProjectSettings) string {
	var parts []string
	if r := s.Retention; r != nil {
		for _, f := range []struct {
			name string
			v    *string
		}{{"after_success", r.AfterSuccess}, {"after_failure", r.AfterFailure}, {"after_completion", r.AfterCompletion}} {
			if f.v != nil {
				parts = append(parts, f.name+" "+*f.v)
			}
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("project %s retention: the server's defaults", project)
	}
	return fmt.Sprintf("project %s retention %s", project, strings.Join(parts, ", "))
}

func newSettingsGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Show the project's settings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetProjectSettingsWithResponse(cmd.Context(), g.project)
			if err != nil {
				return fmt.Errorf("get settings of %s: %w", g.project, err)
			}
			s, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), s, retentionLine(g.project, *s))
		},
	}
}

func newSettingsSet(g *globals) *cobra.Command {
	var success, failure, completion string
	cmd := &cobra.Command{
		Use:   "set [--retention-after-success D] [--retention-after-failure D] [--retention-after-completion D]",
		Short: "Replace the project's settings (admin)",
		Long: `Replace the project's settings (an admin token). The retention flags are
durations such as 2s or 720h: how long the project's ended runs are kept when
their spec has no ttl for their outcome (after_success for a SUCCEEDED run,
after_failure for any other end, after_completion for either); a flag left
out falls back to the server's default. They apply to runs that end from
then on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var body api.ProjectSettings
			if success != "" || failure != "" || completion != "" {
				body.Retention = &api.TTL{AfterSuccess: unlessEmpty(success), AfterFailure: unlessEmpty(failure),
					AfterCompletion: unlessEmpty(completion)}
			}
			resp, err := c.SetProjectSettingsWithResponse(cmd.Context(), g.project, body)
			if err != nil {
				return fmt.Errorf("set settings of %s: %w", g.project, err)
			}
			s, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), s, retentionLine(g.project, *s))
		},
	}
	cmd.Flags().StringVar(&success, "retention-after-success", "", "keep a SUCCEEDED run this long")
	cmd.Flags().StringVar(&failure, "retention-after-failure", "", "keep a run that ended any other way this long")
	cmd.Flags().StringVar(&completion, "retention-after-completion", "", "keep a run whose outcome has no flag this long")
	return cmd
}

// unlessEmpty is &s, or nil for "".
func unlessEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
