package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestForEachCountsLinesOfAModule fans out over real input: a step lists
// the .go files of a module in the Go module cache as a JSON array, a
// for_each step counts each file's lines with wc -l, and a last step sums
// them; the sum equals the lines of the files read directly.
func TestForEachCountsLinesOfAModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/google/uuid").Output()
	require.NoError(t, err, "go list the module's directory")
	cached, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.go"))
	require.NoError(t, err)
	require.Greater(t, len(cached), 5, "a module with files to count")
	s := Start(t, bins, Options{})
	// The tasks read a copy any user may read, where a sandboxed attempt
	// sees it: its user cannot enter the module cache under the test
	// user's home, and its /tmp is its own (the data directory stays).
	dir := filepath.Join(s.DataDir, "module")
	require.NoError(t, os.Mkdir(dir, 0o755))
	want := 0
	var files []string
	for _, f := range cached {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		want += bytes.Count(raw, []byte("\n"))
		files = append(files, filepath.Join(dir, filepath.Base(f)))
		require.NoError(t, os.WriteFile(files[len(files)-1], raw, 0o644))
	}

	list := `sep=''; printf '[' > "$CAPSTAN_OUTPUTS_DIR/files"
for f in "$DIR"/*.go; do printf '%s"%s"' "$sep" "$f" >> "$CAPSTAN_OUTPUTS_DIR/files"; sep=','; done
printf ']' >> "$CAPSTAN_OUTPUTS_DIR/files"`
	sum := `echo "$LINES" | sed 's/\\n/ /g' | tr -c '0-9' ' ' | awk '{for (i = 1; i <= NF; i++) s += $i} END {printf "%d", s}' > "$CAPSTAN_OUTPUTS_DIR/total"`
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "list", Command: &list, Env: &map[string]string{"DIR": dir}, Outputs: &[]string{"files"}},
		{Name: "count", Command: ptr(`wc -l < "$FILE" | tr -d ' \n' > "$CAPSTAN_OUTPUTS_DIR/lines"`),
			Outputs: &[]string{"lines"}, ForEach: &api.ForEach{From: ptr("list.files"), As: ptr("FILE")}},
		{Name: "sum", Command: &sum, Outputs: &[]string{"total"},
			Inputs: &[]api.StepInput{{From: "count.lines", As: "LINES"}}},
	}})
	run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	count := action(run, "count")
	require.Equal(t, len(files), count.TaskCount, "a task per file")
	var lines []string
	require.NoError(t, json.Unmarshal([]byte((*count.Outputs)["lines"]), &lines))
	require.Len(t, lines, len(files), "an output per item, in index order")
	for i, f := range files {
		raw, _ := os.ReadFile(f)
		require.Equal(t, strconv.Itoa(bytes.Count(raw, []byte("\n"))), lines[i], "item %d: %s", i, f)
	}
	total := (*action(run, "sum").Outputs)["total"]
	require.Equal(t, strconv.Itoa(want), total, "the sum of the items' counts")
}

// TestForEachMaxParallel runs 30 sleep items with max_parallel 3: sampled
// every 20 ms, never more than 3 of them are ASSIGNED, BUILDING or RUNNING,
// and 3 do run at once.
func TestForEachMaxParallel(t *testing.T) {
	s := Start(t, bins, Options{Executors: 2})
	items := make([]any, 30)
	for i := range items {
		items[i] = i
	}
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "nap", Command: ptr("sleep 0.2"),
		ForEach: &api.ForEach{Items: &items, MaxParallel: ptr(3)}}}})
	ctx := context.Background()
	most := 0
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		require.True(t, time.Now().Before(deadline), "run %s did not end", name)
		resp, err := s.Client.GetActionWithResponse(ctx, project, domain, name, "nap", &api.GetActionParams{})
		require.NoError(t, err)
		if resp.StatusCode() == 404 {
			continue // the scheduler has not expanded the run yet
		}
		require.NotNil(t, resp.JSON200, "get action: %d %s", resp.StatusCode(), resp.Body)
		live := 0
		for st, n := range resp.JSON200.TaskCounts {
			if st == "ASSIGNED" || st == "BUILDING" || st == "RUNNING" {
				live += n
			}
		}
		require.LessOrEqual(t, live, 3, "max_parallel 3")
		most = max(most, live)
		if resp.JSON200.Phase == api.PhaseSUCCEEDED {
			break
		}
		require.NotEqual(t, api.PhaseFAILED, resp.JSON200.Phase)
	}
	require.Equal(t, 3, most, "three ran at once")
	require.Equal(t, 30, action(getRun(t, s, name), "nap").TaskCounts["SUCCEEDED"])
}

// TestForEachBadInput checks the 422s a for_each's spec gets, naming the
// field.
func TestForEachBadInput(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1})
	ctx := context.Background()
	list := api.Step{Name: "list", Command: ptr("true"), Outputs: &[]string{"files"}}
	for field, fe := range map[string]api.ForEach{
		"spec.steps[1].for_each":              {From: ptr("list.files"), Items: &[]any{1}},
		"spec.steps[1].for_each.from":         {From: ptr("nope.files")},
		"spec.steps[1].for_each.as":           {Items: &[]any{1}, As: ptr("not-an-env")},
		"spec.steps[1].for_each.max_parallel": {Items: &[]any{1}, MaxParallel: ptr(0)},
	} {
		spec := api.WorkflowSpec{Steps: []api.Step{list, {Name: "each", Command: ptr("true"), ForEach: &fe}}}
		resp, err := s.Client.CreateRunWithResponse(ctx, project, domain, nil, api.CreateRunRequest{Spec: &spec})
		require.NoError(t, err)
		require.Equal(t, 422, resp.StatusCode(), "%s: %s", field, resp.Body)
		require.Contains(t, string(resp.Body), `"field":"`+field+`"`, "%s", resp.Body)
	}
}
