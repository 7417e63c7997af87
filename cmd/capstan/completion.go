package main

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// completionTimeout bounds the requests of one shell completion: a slow
// API leaves the shell with no candidates, not stuck.
const completionTimeout = 5 * time.Second

// completer lists the candidates of one argument from the live API (the
// first page, filtered by the prefix typed); args are the arguments
// before it.
type completer func(ctx context.Context, c *api.ClientWithResponses, g *globals, args []string, prefix string) []string

// argCompleters are the completers of the commands' arguments, by command
// path without "capstan " and then by argument position.
var argCompleters = map[string][]completer{
	"run get": {runNames}, "run abort": {runNames}, "run delete": {runNames}, "run suspend": {runNames},
	"run resume": {runNames}, "run restart": {runNames}, "run wait": {runNames}, "run wait-abort": {runNames},
	"run watch": {runNames}, "action get": {runNames, stepNames}, "action abort": {runNames, stepNames},
	"approve": {runNames, stepNames}, "reject": {runNames, stepNames}, "logs": {runNames, stepNames},
	"token revoke": {tokenIDs}, "workflow get": {workflowNames}, "workflow versions": {workflowNames},
	"workflow delete": {workflowNames}, "schedule get": {scheduleNames}, "schedule delete": {scheduleNames},
	"schedule pause": {scheduleNames}, "schedule unpause": {scheduleNames}, "schedule trigger": {scheduleNames},
	"schedule backfill": {scheduleNames}, "trigger get": {triggerNames}, "trigger delete": {triggerNames},
}

// flagCompleters are the completers of flags, by command path and flag;
// the flag's completer gets the command's arguments.
var flagCompleters = map[string]map[string]completer{
	"run restart": {"from-step": stepNames},
	"run create":  {"workflow": workflowNames},
}

// setCompletions gives cmd and its subcommands their completers.
func setCompletions(cmd *cobra.Command, g *globals) {
	path := strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), "capstan"), " ")
	if cs, ok := argCompleters[path]; ok {
		cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			if len(args) >= len(cs) {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return complete(cmd, g, cs[len(args)], args, prefix)
		}
	}
	for flag, c := range flagCompleters[path] {
		_ = cmd.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			return complete(cmd, g, c, append(args[:0:0], args...), prefix)
		})
	}
	for _, sub := range cmd.Commands() {
		setCompletions(sub, g)
	}
}

// complete runs c against the API g names; an error gives no candidates.
func complete(cmd *cobra.Command, g *globals, c completer, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if err := g.resolve(cmd); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	client, err := g.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	return c(ctx, client, g, args, prefix), cobra.ShellCompDirectiveNoFileComp
}

// runNamePart is what ListRuns' name_contains takes.
var runNamePart = regexp.MustCompile(`^[-a-z0-9]{1,63}$`)

// runNames completes a run's name: the newest runs whose name starts with
// prefix.
func runNames(ctx context.Context, c *api.ClientWithResponses, g *globals, _ []string, prefix string) []string {
	limit := 100
	params := &api.ListRunsParams{Limit: &limit}
	if runNamePart.MatchString(prefix) {
		params.NameContains = &prefix
	}
	resp, err := c.ListRunsWithResponse(ctx, g.project, g.domain, params)
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	var out []string
	for _, r := range resp.JSON200.Runs {
		out = appendPrefixed(out, r.Name, prefix)
	}
	return out
}

// stepNames completes a step of the run args[0] names.
func stepNames(ctx context.Context, c *api.ClientWithResponses, g *globals, args []string, prefix string) []string {
	if len(args) == 0 {
		return nil
	}
	run, err := getRun(ctx, c, g, args[0])
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range run.Actions {
		if a.Name != "a0" {
			out = appendPrefixed(out, a.Name, prefix)
		}
	}
	return out
}

// tokenIDs completes a token's id, with its name and role as the
// description.
func tokenIDs(ctx context.Context, c *api.ClientWithResponses, _ *globals, _ []string, prefix string) []string {
	resp, err := c.ListTokensWithResponse(ctx)
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	var out []string
	for _, t := range resp.JSON200.Tokens {
		if t.RevokedAt == nil && strings.HasPrefix(t.Id, prefix) {
			out = append(out, t.Id+"\t"+t.Name+" ("+string(t.Role)+")")
		}
	}
	return out
}

// workflowNames completes a workflow template's name.
func workflowNames(ctx context.Context, c *api.ClientWithResponses, g *globals, _ []string, prefix string) []string {
	limit := 100
	resp, err := c.ListWorkflowsWithResponse(ctx, g.project, g.domain, &api.ListWorkflowsParams{Limit: &limit})
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	var out []string
	for _, w := range resp.JSON200.Workflows {
		out = appendPrefixed(out, w.Name, prefix)
	}
	return out
}

// scheduleNames completes a schedule's name.
func scheduleNames(ctx context.Context, c *api.ClientWithResponses, g *globals, _ []string, prefix string) []string {
	limit := 100
	resp, err := c.ListSchedulesWithResponse(ctx, g.project, g.domain, &api.ListSchedulesParams{Limit: &limit})
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	var out []string
	for _, s := range resp.JSON200.Schedules {
		out = appendPrefixed(out, s.Name, prefix)
	}
	return out
}

// triggerNames completes a trigger's name.
func triggerNames(ctx context.Context, c *api.ClientWithResponses, g *globals, _ []string, prefix string) []string {
	limit := 100
	resp, err := c.ListTriggersWithResponse(ctx, g.project, g.domain, &api.ListTriggersParams{Limit: &limit})
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	var out []string
	for _, t := range resp.JSON200.Triggers {
		out = appendPrefixed(out, t.Name, prefix)
	}
	return out
}

// appendPrefixed appends name to out when it starts with prefix.
func appendPrefixed(out []string, name, prefix string) []string {
	if strings.HasPrefix(name, prefix) {
		return append(out, name)
	}
	return out
}
