package main

import (
	"net/http"
	"strings"
	"testing"
)

// run get shows each step's tasks counted by state, not a line per task;
// action get lists a page of tasks and how to ask for the next.
func TestTasksCountedAndPaged(t *testing.T) {
	t.Parallel()
	const run = `{"project":"demo","domain":"dev","name":"r1","phase":"RUNNING","created_at":"2026-01-01T00:00:00Z",` +
		`"updated_at":"2026-01-01T00:00:00Z","spec":{"steps":[]},"actions":[` +
		`{"name":"a0","kind":"workflow","phase":"RUNNING","task_count":0,"task_counts":{},"tasks":[]},` +
		`{"name":"wide","kind":"task","phase":"RUNNING","generation":1,"task_count":10000,` +
		`"task_counts":{"SUCCEEDED":9990,"RUNNING":10},"tasks":[],"tasks_next_cursor":"MTo5OQ"}]}`
	_, api := newStandIn(t, http.StatusOK, "application/json", run)
	out, err := capstan(api, "run", "get", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(squeeze(out), "\nwide RUNNING 10000 (gen 1) RUNNING 10, SUCCEEDED 9990\n") || strings.Count(out, "\n") != 4 {
		t.Errorf("run get:\n%s", out)
	}

	const action = `{"name":"wide","kind":"task","phase":"RUNNING","generation":1,"task_count":10000,` +
		`"task_counts":{"SUCCEEDED":9990,"RUNNING":10},"tasks_next_cursor":"MTo5OQ","tasks":[` +
		`{"index":99,"generation":1,"state":"RUNNING","failure_count":0,"preemption_count":0,"max_retries_failure":0,` +
		`"max_retries_preemption":100,"attempts":[{"id":7,"number":1,"state":"RUNNING","created_at":"2026-01-01T00:00:00Z"}]}]}`
	stand, api := newStandIn(t, http.StatusOK, "application/json", action)
	out, err = capstan(api, "action", "get", "r1", "wide", "--cursor", "MTo5OA", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10000 tasks (RUNNING 10, SUCCEEDED 9990)", "\n99 RUNNING #1 RUNNING\n",
		"more: capstan action get r1 wide --cursor MTo5OQ"} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("action get: no %q in\n%s", want, out)
		}
	}
	if got := stand.received(); len(got) != 1 || !strings.Contains(got[0].query, "cursor=MTo5OA") ||
		!strings.Contains(got[0].query, "limit=1") {
		t.Errorf("requests %+v, want one GET with the cursor and limit", got)
	}
}

// squeeze is out with each line's runs of blanks made one space, and
// trailing blanks dropped: a table's cells, however wide its columns.
func squeeze(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}
