package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/capstan-run/capstan/pkg/api"
)

// maxBatch is the most runs the API creates in one batch request.
const maxBatch = 1000

// readSpecs reads the workflow specs of path, YAML or JSON, refusing
// unknown fields: one per YAML document of the file (readDocuments).
// Errors: unreadable or invalid input, or a file with no spec.
func readSpecs(path string) ([]api.WorkflowSpec, error) {
	if err := lintFile(path, kindSpec); err != nil {
		return nil, err
	}
	return readDocuments[api.WorkflowSpec](path, "workflow spec")
}

// createRuns creates the run of each item through the batch route, up to
// maxBatch a request, and prints each created run as run create prints one
// (on out); each document the API refused is a line "document N: STATUS
// CODE: DETAIL" on errOut. Errors: a request refused whole, or — after
// every result is printed — a problemError counting the refused documents
// (both exitAPI).
func createRuns(ctx context.Context, c *api.ClientWithResponses, g *globals, out, errOut io.Writer,
	items []api.CreateRunsItem) error {
	refused := 0
	for start := 0; start < len(items); start += maxBatch {
		chunk := items[start:min(start+maxBatch, len(items))]
		body := api.CreateRunsRequest{Runs: make([]map[string]any, len(chunk))}
		for i, item := range chunk {
			if err := api.ConvertJSON(item, &body.Runs[i]); err != nil {
				return fmt.Errorf("document %d: %w", start+i+1, err)
			}
		}
		resp, err := c.CreateRunsWithResponse(ctx, g.project, g.domain, body)
		if err != nil {
			return fmt.Errorf("create runs %d to %d of %d: %w", start+1, start+len(chunk), len(items), err)
		}
		if resp.JSON200 == nil {
			return apiError(resp.StatusCode(), resp.Body)
		}
		for i, r := range resp.JSON200.Results {
			if r.Run == nil {
				refused++
				fmt.Fprintf(errOut, "document %d: %s\n", start+i+1, resultProblem(r))
				continue
			}
			if err := g.printLine(out, r.Run, r.Run.Name); err != nil {
				return err
			}
		}
	}
	if refused > 0 {
		return &problemError{msg: fmt.Sprintf("%d of %d runs not created", refused, len(items))}
	}
	return nil
}

// resultProblem renders a refused item's problem as apiError does.
func resultProblem(r api.RunBatchResult) string {
	if r.Error == nil {
		return "no run and no problem in the answer"
	}
	raw, err := json.Marshal(r.Error)
	if err != nil {
		return err.Error()
	}
	return apiError(r.Error.Status, raw).Error()
}
