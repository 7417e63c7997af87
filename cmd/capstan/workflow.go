package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// capstan workflow push|list|get|versions|delete: the routes of workflow
// templates, .../workflows.

func newWorkflow(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workflow", Short: "Push, list, show and delete workflow templates (versioned, run by name)"}
	cmd.AddCommand(newWorkflowPush(g), newWorkflowList(g), newWorkflowGet(g), newWorkflowVersions(g), newWorkflowDelete(g))
	return cmd
}

// parseRef parses NAME[@VERSION]; no version is the latest. A VERSION that
// is not a positive integer is a usage error.
func parseRef(s string) (api.WorkflowRef, error) {
	name, v, hasVersion := strings.Cut(s, "@")
	ref := api.WorkflowRef{Name: name}
	if name == "" {
		return ref, usagef("%q: want NAME or NAME@VERSION", s)
	}
	if hasVersion {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return ref, usagef("%q: the version after @ must be a positive integer", s)
		}
		ref.Version = &n
	}
	return ref, nil
}

// refString is ref as parseRef reads it, "NAME@latest" without a version.
func refString(ref api.WorkflowRef) string {
	if ref.Version == nil {
		return ref.Name + "@latest"
	}
	return fmt.Sprintf("%s@%d", ref.Name, *ref.Version)
}

// getTemplate reads the version of the template ref names (its latest
// when ref has none).
func getTemplate(ctx context.Context, c *api.ClientWithResponses, g *globals, ref api.WorkflowRef) (*api.WorkflowTemplate, error) {
	if ref.Version == nil {
		resp, err := c.GetWorkflowWithResponse(ctx, g.project, g.domain, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("get workflow %s: %w", ref.Name, err)
		}
		return answer(resp.JSON200, resp.StatusCode(), resp.Body)
	}
	resp, err := c.GetWorkflowVersionWithResponse(ctx, g.project, g.domain, ref.Name, *ref.Version)
	if err != nil {
		return nil, fmt.Errorf("get workflow %s version %d: %w", ref.Name, *ref.Version, err)
	}
	return answer(resp.JSON200, resp.StatusCode(), resp.Body)
}

// answer is v, the success answer of a response, or the API's refusal
// (apiError) when the response was not that success.
func answer[T any](v *T, status int, body []byte) (*T, error) {
	if v == nil {
		return nil, apiError(status, body)
	}
	return v, nil
}

// deleted is nil for a delete's 204 (or 200) answer, else the refusal.
func deleted(status int, body []byte) error {
	if status != http.StatusNoContent && status != http.StatusOK {
		return apiError(status, body)
	}
	return nil
}

func newWorkflowPush(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "push -f FILE",
		Short: "Register a version of each template of a file (YAML or JSON: {name, description?, params?, spec})",
		Long: `Register a version of a workflow template from a file (YAML or JSON):

  name: hello
  description: greets someone
  params:
    - {name: WHO, type: string, required: true}
    - {name: TIMES, type: number, default: 1}
  spec:
    steps:
      - {name: greet, command: 'echo hello $WHO'}

It prints "workflow NAME: created version N", or "workflow NAME: unchanged,
version N" when the file equals the latest version. A file of several YAML
documents pushes each in turn and stops at the first the API refuses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lintFile(file, kindTemplate); err != nil {
				return usageError{err}
			}
			docs, err := readDocuments[api.PushWorkflowRequest](file, "workflow template")
			if err != nil {
				return usageError{err}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, doc := range docs {
				if err := pushWorkflow(cmd.Context(), c, g, cmd.OutOrStdout(), doc); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "template file (required)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// pushWorkflow pushes one template and prints what became of it.
func pushWorkflow(ctx context.Context, c *api.ClientWithResponses, g *globals, out io.Writer, doc api.PushWorkflowRequest) error {
	resp, err := c.PushWorkflowWithResponse(ctx, g.project, g.domain, doc)
	if err != nil {
		return fmt.Errorf("push workflow %s: %w", doc.Name, err)
	}
	if t := resp.JSON201; t != nil {
		return g.printLine(out, t, fmt.Sprintf("workflow %s: created version %d", t.Name, t.Version))
	}
	t, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
	if err != nil {
		return err
	}
	return g.printLine(out, t, fmt.Sprintf("workflow %s: unchanged, version %d", t.Name, t.Version))
}

func newWorkflowList(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List templates, the latest version of each (params: * required, =default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListWorkflowsWithResponse(cmd.Context(), g.project, g.domain, &api.ListWorkflowsParams{Limit: &limit})
			if err != nil {
				return fmt.Errorf("list workflows of %s/%s: %w", g.project, g.domain, err)
			}
			list, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), list, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tLATEST\tPARAMS\tCREATED")
				for _, t := range list.Workflows {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", t.Name, t.Version, paramsColumn(t.Params), t.CreatedAt.Local().Format(time.DateTime))
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

func newWorkflowGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME[@VERSION]",
		Short: "Show a template's latest version (or VERSION) as YAML (-o json: JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := parseRef(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := getTemplate(cmd.Context(), c, g, ref)
			if err != nil {
				return err
			}
			return g.printDocument(cmd.OutOrStdout(), t)
		},
	}
}

func newWorkflowVersions(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "versions NAME",
		Short: "List every version of a template, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListWorkflowVersionsWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("list versions of workflow %s: %w", args[0], err)
			}
			list, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), list, func(w io.Writer) {
				fmt.Fprintln(w, "VERSION\tPARAMS\tCREATED\tDESCRIPTION")
				for _, t := range list.Workflows {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", t.Version, paramsColumn(t.Params), t.CreatedAt.Local().Format(time.DateTime),
						nonEmpty(oneLine(t.Description), "-"))
				}
			})
		},
	}
}

func newWorkflowDelete(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a template: no new runs of it (runs in flight go on; a later push brings it back)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.DeleteWorkflowWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("delete workflow %s: %w", args[0], err)
			}
			if err := deleted(resp.StatusCode(), resp.Body); err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), map[string]string{"deleted": args[0]}, "workflow "+args[0]+" deleted")
		},
	}
}
