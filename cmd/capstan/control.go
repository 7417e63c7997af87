package main

import (
	"fmt"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// The run's control commands: suspend, resume and restart. Each records the
// request through the API (202) and returns; the scheduler applies it, and
// `capstan run get` or `run wait` shows the phases that follow.

func newSuspend(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "suspend RUN",
		Short: "Suspend a run: no new step starts, running tasks finish, then the run is PAUSED",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.SuspendRunWithResponse(cmd.Context(), g.project, g.domain, args[0], api.RunSignalRequest{})
			if err != nil {
				return fmt.Errorf("suspend run %s: %w", args[0], err)
			}
			if resp.JSON202 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "suspend of %s accepted (phase %s)\n", args[0], resp.JSON202.Phase)
			return nil
		},
	}
}

func newResume(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume RUN",
		Short: "Resume a run, its suspend steps without a duration and a step paused after its retries",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ResumeRunWithResponse(cmd.Context(), g.project, g.domain, args[0], api.RunSignalRequest{})
			if err != nil {
				return fmt.Errorf("resume run %s: %w", args[0], err)
			}
			if resp.JSON202 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resume of %s accepted (phase %s)\n", args[0], resp.JSON202.Phase)
			return nil
		},
	}
}

func newRestart(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "restart RUN [--from-step STEP]",
		Short: "Restart a failed run from a step (default: every step that did not succeed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			body := api.RestartRequest{}
			what := "every step that did not succeed"
			if from != "" {
				body.FromStep, what = &from, "step "+from+" and what follows it"
			}
			resp, err := c.RestartRunWithResponse(cmd.Context(), g.project, g.domain, args[0], body)
			if err != nil {
				return fmt.Errorf("restart run %s: %w", args[0], err)
			}
			if resp.JSON202 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restart of %s accepted: %s runs again\n", args[0], what)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from-step", "", "the step to re-run with everything downstream of it")
	return cmd
}

// actionNote is what `run get` says about an action besides its phase and
// tasks: what it waits for, why it ended, its approval, retries, abort.
func actionNote(a api.Action) string {
	var parts []string
	if a.WaitingFor != nil {
		parts = append(parts, "waiting for "+*a.WaitingFor)
	}
	if a.Reason != nil {
		parts = append(parts, "reason: "+*a.Reason)
	}
	if ap := a.Approval; ap != nil {
		s := string(ap.Decision)
		if ap.TokenName != nil {
			s += " by token " + *ap.TokenName
		}
		if ap.By != nil {
			s += " as " + *ap.By
		}
		if ap.Comment != nil {
			s += fmt.Sprintf(" (%q)", *ap.Comment)
		}
		parts = append(parts, s)
	}
	if a.StepRetries != nil && *a.StepRetries > 0 {
		parts = append(parts, fmt.Sprintf("step retries %d", *a.StepRetries))
	}
	if a.CacheStatus != nil {
		parts = append(parts, "cache "+string(*a.CacheStatus))
	}
	if n := abortNote(a); n != "" {
		parts = append(parts, n)
	}
	return strings.Join(parts, "; ")
}
