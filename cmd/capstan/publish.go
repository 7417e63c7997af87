package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/spf13/cobra"
)

// capstan event publish|get: published events, POST and GET
// .../events[/{id}] (GET .../events itself is the event stream).

func newEvent(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "event", Short: "Publish an event (it starts a run per matching trigger), or show a published one"}
	cmd.AddCommand(newEventPublish(g), newEventGet(g))
	return cmd
}

func newEventPublish(g *globals) *cobra.Command {
	var id, payload string
	cmd := &cobra.Command{
		Use:   "publish KEY [--id ID] [--payload JSON|@FILE]",
		Short: "Publish an event of KEY; each trigger of KEY whose filter passes starts a run",
		Long: `Publish an event of KEY (e.g. order.created) with a JSON object as its
payload, given on the command line or, after @, as a file's path ("@-" reads
stdin). It prints the event's id and each trigger's delivery: the run it
started, the error that stopped it, or "filtered out". An --id published
before starts nothing new: the answer is the first publication's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := api.PublishEventRequest{Key: args[0]}
			if id != "" {
				body.Id = &id
			}
			if payload != "" {
				p, err := readPayload(payload, cmd.InOrStdin())
				if err != nil {
					return err
				}
				body.Payload = &p
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.PublishEventWithResponse(cmd.Context(), g.project, g.domain, body)
			if err != nil {
				return fmt.Errorf("publish event %s: %w", args[0], err)
			}
			ev, err := answer(resp.JSON202, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), ev, func(w io.Writer) { printEvent(w, ev) })
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "idempotency id (default: the server makes one)")
	cmd.Flags().StringVar(&payload, "payload", "", `the payload, a JSON object: '{"amount": 120}', or @FILE, or @- for stdin`)
	return cmd
}

// readPayload is --payload's JSON object: v itself, or the file after "@"
// ("@-": stdin). Usage errors: an unreadable file, text that is not a JSON
// object (naming the line of a syntax error).
func readPayload(v string, stdin io.Reader) (map[string]any, error) {
	raw, where := []byte(v), "--payload"
	if path, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if path == "-" {
			raw, err = io.ReadAll(stdin)
		} else {
			raw, err = os.ReadFile(path)
		}
		if err != nil {
			return nil, usageError{err}
		}
		where = "--payload " + v
	}
	var p map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	err := dec.Decode(&p)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return nil, usagef("%s: line %d: %s", where, bytes.Count(raw[:min(int(se.Offset), len(raw))], []byte("\n"))+1, se)
	case errors.As(err, &te) || err == nil && p == nil:
		return nil, usagef("%s: want a JSON object", where)
	case err != nil:
		return nil, usagef("%s: not JSON: %v", where, err)
	case dec.More():
		return nil, usagef("%s: want one JSON object; more follows it", where)
	}
	return p, nil
}

func newEventGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a published event and each trigger's delivery",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.GetPublishedEventWithResponse(cmd.Context(), g.project, g.domain, args[0])
			if err != nil {
				return fmt.Errorf("get event %s: %w", args[0], err)
			}
			ev, err := answer(resp.JSON200, resp.StatusCode(), resp.Body)
			if err != nil {
				return err
			}
			return g.printOut(cmd.OutOrStdout(), ev, func(w io.Writer) { printEvent(w, ev) })
		},
	}
}

// printEvent writes ev as a heading and a line per delivery.
func printEvent(w io.Writer, ev *api.PublishedEvent) {
	fmt.Fprintf(w, "event %s  %s  %s  started %d run(s)\n", ev.Id, ev.Key, ev.CreatedAt.Local().Format(time.DateTime), len(ev.Runs))
	if len(ev.Deliveries) == 0 {
		fmt.Fprintln(w, "no trigger of this key")
		return
	}
	fmt.Fprintln(w, "TRIGGER\tRUN\tERROR")
	for _, d := range ev.Deliveries {
		run := deref(d.Run)
		if run == "" && d.Error == nil {
			run = "(filtered out)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", d.Trigger, nonEmpty(run, "-"), nonEmpty(oneLine(deref(d.Error)), "-"))
	}
}
