package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

func newLint() *cobra.Command {
	var files []string
	var template bool
	var kindName string
	cmd := &cobra.Command{
		Use:   "lint -f FILE...",
		Short: "Check workflow, schedule and trigger files offline, as the API would, naming each problem's line",
		Long: `Check files offline against the API's own rules (the embedded OpenAPI
schema, then the rules the API applies), without sending anything. Each
problem is a line "FILE:LINE: FIELD: PROBLEM", an unknown field with the
known one nearest to it:

  wf.yaml:7: steps[2].comand: unknown field (did you mean "command"?)

A document's kind is --kind, else read from its top-level keys: spec makes a
template (capstan workflow push -f), event_key a trigger (capstan trigger
create -f), cron or interval a schedule (capstan schedule create -f), and
anything else a workflow spec (capstan run create -f). What needs the API
(a template a schedule or trigger starts, a rate limit) is not checked.
Exits 2 when there is a problem. run create -f, workflow push -f, schedule
create -f and trigger create -f check their file the same way before
sending.`,
		Example: `  capstan lint -f examples/hello.yaml
  capstan lint -f a.yaml -f b.yaml
  capstan lint --kind schedule -f nightly.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef("give a file: -f FILE")
			}
			kind := lintKind("")
			switch {
			case template && kindName != "" && kindName != "template":
				return usagef("--template and --kind %s disagree", kindName)
			case template:
				kind = kindTemplate
			case kindName != "":
				i := slices.Index(lintKindNames, kindName)
				if i < 0 {
					return usagef("--kind: %q is not one of %s", kindName, strings.Join(lintKindNames, ", "))
				}
				kind = lintKindsByName[i]
			}
			all := &lintError{}
			for _, f := range files {
				err := lintFile(f, kind)
				var found *lintError
				switch {
				case err == nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", f)
				case errors.As(err, &found):
					all.findings = append(all.findings, found.findings...)
				default:
					return usagef("%s: %v", f, err)
				}
			}
			if len(all.findings) > 0 {
				return usageError{all}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "a workflow file, YAML or JSON (repeatable)")
	cmd.Flags().BoolVar(&template, "template", false, "each document is a workflow template (--kind template)")
	cmd.Flags().StringVar(&kindName, "kind", "", "what each document is: spec, template, schedule or trigger (default: read from its keys)")
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(lintKindNames, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
