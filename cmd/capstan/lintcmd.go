package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

func newLint() *cobra.Command {
	var files []string
	var template bool
	cmd := &cobra.Command{
		Use:   "lint -f FILE...",
		Short: "Check workflow files offline, as the API would, naming each problem's line",
		Long: `Check workflow files offline against the API's own rules (the embedded
OpenAPI schema, then the workflow rules the API applies), without sending
anything. Each problem is a line "FILE:LINE: FIELD: PROBLEM", an unknown
field with the known one nearest to it:

  wf.yaml:7: steps[2].comand: unknown field (did you mean "command"?)

A document with a top-level spec is a template (capstan workflow push -f),
else a workflow spec (capstan run create -f); --template says so. What needs
the API (a sub-workflow's template, a rate limit) is not checked. Exits 2
when there is a problem. run create -f and workflow push -f check their file
the same way before sending.`,
		Example: `  capstan lint -f examples/hello.yaml
  capstan lint -f a.yaml -f b.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef("give a file: -f FILE")
			}
			kind := lintKind("")
			if template {
				kind = kindTemplate
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
	cmd.Flags().BoolVar(&template, "template", false, "each document is a workflow template")
	return cmd
}
