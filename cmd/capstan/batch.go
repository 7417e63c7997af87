package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"sigs.k8s.io/yaml"
)

// maxBatch is the most runs the API creates in one batch request.
const maxBatch = 1000

// readSpecs reads the workflow specs of path, YAML or JSON, refusing
// unknown fields: one per YAML document of the file (documents are
// separated by "---" lines; those with no content are skipped). Errors:
// unreadable or invalid input, or a file with no spec.
func readSpecs(path string) ([]api.WorkflowSpec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs := yamlDocuments(raw)
	var specs []api.WorkflowSpec
	for i, doc := range docs {
		where := path
		if len(docs) > 1 {
			where = fmt.Sprintf("%s: document %d", path, i+1)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: not valid YAML or JSON: %w", where, err)
		}
		if string(bytes.TrimSpace(js)) == "null" {
			continue // only comments, or nothing, between two "---"
		}
		var spec api.WorkflowSpec
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		specs = append(specs, spec)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: holds no workflow spec", path)
	}
	return specs, nil
}

// yamlDocuments splits raw at its document markers: lines that are "---"
// or start with "--- " (what follows the marker starts the next document).
// A YAML block scalar is indented, so such a line is always a marker.
func yamlDocuments(raw []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(raw, []byte("\n")) {
		trimmed := strings.TrimRight(string(line), "\r\n")
		if trimmed == "---" || strings.HasPrefix(trimmed, "--- ") || strings.HasPrefix(trimmed, "---\t") {
			docs = append(docs, cur)
			cur = []byte(trimmed[3:] + "\n")
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

// createRuns creates a run of each spec through the batch route, up to
// maxBatch a request, and prints each created run as run create prints one
// (on out); each document the API refused is a line "document N: STATUS
// CODE: DETAIL" on errOut. Errors: a request refused whole, or — after
// every result is printed — a problemError counting the refused documents
// (both exitAPI).
func createRuns(ctx context.Context, c *api.ClientWithResponses, g *globals, out, errOut io.Writer,
	specs []api.WorkflowSpec) error {
	refused := 0
	for start := 0; start < len(specs); start += maxBatch {
		chunk := specs[start:min(start+maxBatch, len(specs))]
		body := api.CreateRunsRequest{Runs: make([]map[string]any, len(chunk))}
		for i, spec := range chunk {
			body.Runs[i] = map[string]any{"spec": spec}
		}
		resp, err := c.CreateRunsWithResponse(ctx, g.project, g.domain, body)
		if err != nil {
			return fmt.Errorf("create runs %d to %d of %d: %w", start+1, start+len(chunk), len(specs), err)
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
		return &problemError{msg: fmt.Sprintf("%d of %d runs not created", refused, len(specs))}
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
