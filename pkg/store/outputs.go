package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/capstan-run/capstan/pkg/domain"
)

// stepOutputsSQL reads, for each SUCCEEDED step of a run that declares
// outputs (the one named in @steps, or all when @all), its declared names,
// its replica count, for a for_each step the number of its current
// generation's tasks (NULL for another step), and the outputs of those
// tasks that SUCCEEDED, as JSON [{idx, outputs}] in task-index order: a
// task's own (tasks.outputs, set only on one that succeeded without
// running), else those of its current attempt if that SUCCEEDED. The tasks are found by the (action, generation, idx)
// key, their attempts by (task_id, number). A step completed from the
// cache has its outputs on the action instead (actions.outputs), returned
// as the fifth column.
var stepOutputsSQL = `SELECT x.name, x.spec->'outputs', coalesce((x.spec->>'replicas')::int, 1),
	CASE WHEN x.spec->'for_each' IS NOT NULL THEN (SELECT count(*) FROM tasks t
	  WHERE (t.project, t.domain, t.run_name, t.action_name, t.generation) =
	        (x.project, x.domain, x.run_name, x.name, x.generation)) END,
	CASE WHEN jsonb_typeof(x.outputs) = 'object' THEN x.outputs END,
	(SELECT coalesce(json_agg(json_build_object('idx', t.idx, 'outputs', coalesce(t.outputs, at.outputs))
	   ORDER BY t.idx), '[]')
	   FROM tasks t LEFT JOIN attempts at ON at.task_id = t.id AND at.number = t.attempt_count
	  WHERE (t.project, t.domain, t.run_name, t.action_name, t.generation) =
	        (x.project, x.domain, x.run_name, x.name, x.generation)
	    AND (t.outputs IS NOT NULL OR (at.state IN ` + sqlStates(domain.TaskSucceeded) + ` AND at.outputs IS NOT NULL)))
FROM actions x
WHERE x.project = @project AND x.domain = @domain AND x.run_name = @run AND x.phase = @succeeded
  AND jsonb_array_length(x.spec->'outputs') > 0
  AND (@all OR x.name IN @steps)`

// taskOutputs is one task's outputs as stepOutputsSQL returns them.
type taskOutputs struct {
	Idx     int               `json:"idx"`
	Outputs map[string]string `json:"outputs"`
}

// StepOutputs returns the outputs of the run's named steps (every step when
// steps is empty), step name → output name → value, in one statement
// (KubeVela's outputs, read by conditions over steps.<name>.outputs.<key>,
// by a consumer's inputs and by GET run).
//
// Only a step whose action phase is SUCCEEDED and that declares outputs has
// an entry, with every declared name. Its values are those of its current
// generation's tasks (Action.Generation: a retried or restarted step's older
// tasks are history), each task's value the one its current attempt
// reported SUCCEEDED (or, for a task that succeeded without running, its
// own). With one replica a value is the task's as written
// (trailing newline kept); with more it is a JSON array of the tasks'
// values in task-index order (encoding/json of []string, HTML characters
// not escaped: ["3\n","<b>"]). A declared output no task reported (a task
// failed within max_task_failures) is "", in the array that task's element.
// A for_each step's values are always arrays, one element per item ([]
// for none). A run without such steps, or no such run, gives an empty map.
func (s Actions) StepOutputs(ctx context.Context, runKey domain.RunKey, steps []string) (map[string]map[string]string, error) {
	rows, err := s.raw(ctx, stepOutputsSQL, sql.Named("project", runKey.Project), sql.Named("domain", runKey.Domain),
		sql.Named("run", runKey.Run), sql.Named("succeeded", string(domain.PhaseSucceeded)),
		sql.Named("all", len(steps) == 0), sql.Named("steps", append([]string{""}, steps...))).Rows()
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	out := map[string]map[string]string{}
	for rows.Next() {
		var name string
		var replicas int
		var fanOut *int
		var rawDeclared, rawCached, rawTasks []byte
		if err := rows.Scan(&name, &rawDeclared, &replicas, &fanOut, &rawCached, &rawTasks); err != nil {
			return nil, mapErr(err)
		}
		var declared []string
		var tasks []taskOutputs
		if err := decodeEach([][]byte{rawDeclared, rawTasks}, &declared, &tasks); err != nil {
			return nil, fmt.Errorf("outputs of step %s: %w", name, err)
		}
		if out[name], err = stepValues(declared, replicas, fanOut, rawCached, tasks); err != nil {
			return nil, fmt.Errorf("outputs of step %s: %w", name, err)
		}
	}
	return out, mapErr(rows.Err())
}

// stepValues is a step's value of each declared output: the cached ones
// of a step completed from the cache (rawCached, JSON; "" for a name the
// entry lacks), else aggregateOutputs of its tasks'.
func stepValues(declared []string, replicas int, fanOut *int, rawCached []byte, tasks []taskOutputs) (map[string]string, error) {
	if rawCached == nil {
		return aggregateOutputs(declared, replicas, fanOut, tasks), nil
	}
	var cached map[string]string
	if err := decodeRows(rawCached, &cached); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(declared))
	for _, n := range declared {
		out[n] = cached[n]
	}
	return out, nil
}

// aggregateOutputs is a step's value of each declared output: the task's
// with one replica, else the JSON array of every task's, "" where a task
// reported none. A for_each step (fanOut: its number of tasks) always has
// the array, [] when it had no item.
func aggregateOutputs(declared []string, replicas int, fanOut *int, tasks []taskOutputs) map[string]string {
	out := make(map[string]string, len(declared))
	n := max(replicas, 1)
	if fanOut != nil {
		n = *fanOut
	}
	for _, name := range declared {
		values := make([]string, n)
		for _, t := range tasks {
			if t.Idx >= 0 && t.Idx < len(values) {
				values[t.Idx] = t.Outputs[name]
			}
		}
		if len(values) == 1 && fanOut == nil {
			out[name] = values[0]
			continue
		}
		out[name] = jsonArray(values)
	}
	return out
}

// jsonArray is values as a JSON array, by encoding/json without its HTML
// escaping (`<` stays `<`, not \u003c: the text is no HTML's) and without
// the encoder's trailing newline.
func jsonArray(values []string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(values) // a []string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
