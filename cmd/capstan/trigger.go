package main

import (
	"fmt"
	"io"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// capstan trigger create|list|get|delete: the routes of event triggers,
// .../triggers.

func newTrigger(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "trigger", Short: "Create, list, show and delete triggers: runs of a template started by published events"}
	cmd.AddCommand(newTriggerCreate(g), newTriggerList(g), newTriggerGet(g), newTriggerDelete(g))
	return cmd
}

func newTriggerCreate(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create each trigger of a file (YAML or JSON)",
		Long: `Create a trigger from a file (YAML or JSON):

  name: big-orders
  event_key: order.created
  workflow: {name: ship}                     # no version: the latest at each event
  filter: event.payload.amount > 100         # CEL over event {key, id, payload}; absent: every event
  params: {ORDER: event.payload.id}          # each a CEL expression over event

It prints "trigger NAME created". A file of several YAML documents creates
each in turn and stops at the first the API refuses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lintFile(file, kindTrigger); err != nil {
				return usageError{err}
			}
			docs, err := readDocuments[api.CreateTriggerRequest](file, "trigger")
			if err != nil {
				return usageError{err}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, doc := range docs {
				resp, err := c.CreateTriggerWithResponse(cmd.Context(), g.project, g.domain, doc)
				if err != nil {
					return fmt.Errorf("create trigger %s: %w", doc.Name, err)
				}
				tr, err := answer(resp.JSON201, resp.StatusCode(), resp.Body)
				if err != nil {
					return err
				}
				line := fmt.Sprintf("trigger %s created: %s starts %s", tr.Name, tr.EventKey, refString(tr.Workflow))
				if err := g.printLine(cmd.OutOrStdout(), tr, line); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "trigger file (required)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func newTriggerList(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List triggers by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListTriggersWithResponse(cmd.Context(), g.project, g.domain, &api.ListTriggersParams{Limit: &limit})
			if err != nil {
				return fmt.Errorf("list triggers of %s/%s: %w", g.project, g.domain, err)
			}
			list, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), list, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tEVENT KEY\tWORKFLOW\tFILTER\tCREATED")
				for _, tr := range list.Triggers {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", tr.Name, tr.EventKey, refString(tr.Workflow),
						nonEmpty(oneLine(deref(tr.Filter)), "-"), tr.CreatedAt.Local().Format(time.DateTime))
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	return cmd
}

func newTriggerGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a trigger as YAML (-o json: JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetTriggerWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("get trigger %s: %w", args[0], err)
			}
			tr, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printDocument(cmd.OutOrStdout(), tr)
		},
	}
}

func newTriggerDelete(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a trigger; later events start nothing through it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.DeleteTriggerWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("delete trigger %s: %w", args[0], err)
			}
			if err := deleted(resp.StatusCode(), resp.Body); err != nil {
				return err
			}
			return g.printLine(cmd.OutOrStdout(), map[string]string{"deleted": args[0]}, "trigger "+args[0]+" deleted")
		},
	}
}
