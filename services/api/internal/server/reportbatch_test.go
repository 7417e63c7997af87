package server

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// A batch of reports is recorded in order, each item on its own: another
// worker's attempt is 404, a PENDING report is ignored (Iris's controller
// ignores it), and neither stops the others. The attempt that ended is handed to the
// scheduler once. The same batch sent again changes nothing.
func TestReportBatchRecordsInOrderAndIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key, id, worker := f.placedAttempt(t)
	other := f.assignA(t, f.startedRun(t)) // on a second worker

	body := fmt.Sprintf(`{"reports":[
		{"attempt_id":%[1]d,"report":{"state":"BUILDING"}},
		{"attempt_id":%[1]d,"report":{"state":"RUNNING","pid":42}},
		{"attempt_id":%[2]d,"report":{"state":"RUNNING"}},
		{"attempt_id":%[1]d,"report":{"state":"PENDING"}},
		{"attempt_id":%[1]d,"report":{"state":"SUCCEEDED","exit_code":0}}]}`, id, other)
	type result struct {
		proceed bool
		status  float64
	}
	post := func() []result {
		status, _, out := f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", body)
		require.Equal(t, http.StatusOK, status, out)
		var got []result
		for _, r := range out["results"].([]any) {
			m := r.(map[string]any)
			res := result{proceed: m["proceed"].(bool)}
			if p, ok := m["error"].(map[string]any); ok {
				res.status = p["status"].(float64)
			}
			got = append(got, res)
		}
		return got
	}
	require.Equal(t, []result{{true, 0}, {true, 0}, {false, 404}, {true, 0}, {false, 0}}, post())
	want := []string{"attempt.BUILDING", "attempt.RUNNING", "attempt.SUCCEEDED"}
	evs := f.events(t, key)
	require.Equal(t, want, evs[len(evs)-3:])
	require.Equal(t, 1, f.pendingEvaluations(t))

	require.Equal(t, []result{{false, 0}, {false, 0}, {false, 404}, {false, 0}, {false, 0}}, post(),
		"resent: the attempt ended; nothing moves")
	require.Equal(t, evs, f.events(t, key), "no event twice")
	require.Equal(t, 1, f.pendingEvaluations(t), "no second evaluation")
	var other0 int
	require.NoError(t, f.db.QueryRow(`SELECT state FROM attempts WHERE id = $1`, other).Scan(&other0))
	require.Equal(t, int(domain.TaskAssigned), other0, "another worker's attempt is left alone")
}

// A batch resent while its attempt still runs records nothing twice.
func TestReportBatchResentWhileRunning(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key, id, worker := f.placedAttempt(t)
	body := fmt.Sprintf(`{"reports":[{"attempt_id":%[1]d,"report":{"state":"BUILDING"}},
		{"attempt_id":%[1]d,"report":{"state":"RUNNING"}}]}`, id)
	for range 2 {
		status, _, out := f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", body)
		require.Equal(t, http.StatusOK, status, out)
		for _, r := range out["results"].([]any) {
			require.Equal(t, true, r.(map[string]any)["proceed"], "resent, the attempt goes on: %v", out)
			require.Nil(t, r.(map[string]any)["error"])
		}
	}
	var n int
	require.NoError(t, f.db.QueryRow(`SELECT count(*) FROM run_events WHERE run_name = $1 AND type LIKE 'attempt.%'`,
		key.Run).Scan(&n))
	require.Equal(t, 2, n, "BUILDING and RUNNING once each")
}

// A batch may be larger than the api's usual body limit (1 MiB): its
// reports carry outputs and logs. Over its own limit it is refused whole.
func TestReportBatchBodyLimit(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	_, id, worker := f.placedAttempt(t)
	batch := func(n int) string {
		return fmt.Sprintf(`{"reports":[{"attempt_id":%d,"report":{"state":"RUNNING","stdout":"%s"}}]}`, id,
			strings.Repeat("x", n))
	}
	status, _, out := f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", batch(3<<20))
	require.Equal(t, http.StatusOK, status, out)
	status, _, out = f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", batch(17<<20))
	require.Equal(t, http.StatusRequestEntityTooLarge, status, out)
}

// Logs travel in a batch too, in order with the reports; another worker's
// attempt is 404, an item that is both a report and logs (or neither) is
// 400.
func TestReportBatchCarriesLogs(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	_, id, worker := f.placedAttempt(t)
	other := f.assignA(t, f.startedRun(t))
	body := fmt.Sprintf(`{"reports":[
		{"attempt_id":%[1]d,"report":{"state":"RUNNING"}},
		{"attempt_id":%[1]d,"logs":[{"stream":"stdout","data":"hello "},{"stream":"stdout","data":"world\n"}]},
		{"attempt_id":%[2]d,"logs":[{"stream":"stdout","data":"not mine"}]},
		{"attempt_id":%[1]d},
		{"attempt_id":%[1]d,"report":{"state":"RUNNING"},"logs":[]},
		{"attempt_id":%[1]d,"report":{"state":"SUCCEEDED","exit_code":0}}]}`, id, other)
	status, _, out := f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", body)
	require.Equal(t, http.StatusOK, status, out)
	var statuses []float64
	for _, r := range out["results"].([]any) {
		var st float64
		if p, ok := r.(map[string]any)["error"].(map[string]any); ok {
			st = p["status"].(float64)
		}
		statuses = append(statuses, st)
	}
	require.Equal(t, []float64{0, 0, 404, 400, 400, 0}, statuses)
	var data string
	require.NoError(t, f.db.QueryRow(`SELECT string_agg(data, '' ORDER BY seq) FROM attempt_log_chunks
		WHERE attempt_id = $1`, id).Scan(&data))
	require.Equal(t, "hello world\n", data)
	var n int
	require.NoError(t, f.db.QueryRow(`SELECT count(*) FROM attempt_log_chunks WHERE attempt_id = $1`, other).Scan(&n))
	require.Zero(t, n)
}

// pendingEvaluations counts the evaluation messages waiting for the
// scheduler, by attempt.
func (f *controlFixture) pendingEvaluations(t *testing.T) int {
	t.Helper()
	insp := asynq.NewInspector(f.redis)
	defer insp.Close()
	pending, err := insp.ListPendingTasks(queue.Scheduler)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pending {
		switch p.Type {
		case queue.TypeTaskEvaluate:
			n++
		case queue.TypeTasksEvaluate:
			var ids queue.AttemptsPayload
			require.NoError(t, queue.Decode(asynq.NewTask(p.Type, p.Payload), &ids))
			n += len(ids.AttemptIDs)
		}
	}
	return n
}

// A heartbeat rides along with a batch: recorded after the items, so an
// attempt that ended in the batch is in its stop list (ended), as is one
// the control plane does not know; the worker's last heartbeat moves. A
// batch without one answers no stop list.
func TestReportBatchCarriesAHeartbeat(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	_, id, worker := f.placedAttempt(t)
	var before time.Time
	require.NoError(t, f.db.QueryRow(`SELECT last_heartbeat_at FROM workers WHERE id = $1`, worker).Scan(&before))
	body := fmt.Sprintf(`{"reports":[{"attempt_id":%[1]d,"report":{"state":"SUCCEEDED","exit_code":0}}],
		"heartbeat":{"attempts":[{"id":%[1]d,"state":"RUNNING"},{"id":987654321,"state":"RUNNING"}]}}`, id)
	status, _, out := f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", body)
	require.Equal(t, http.StatusOK, status, out)
	require.ElementsMatch(t, []any{float64(id), float64(987654321)}, out["stop"])
	var after time.Time
	require.NoError(t, f.db.QueryRow(`SELECT last_heartbeat_at FROM workers WHERE id = $1`, worker).Scan(&after))
	require.True(t, after.After(before), "last heartbeat %v, then %v", before, after)

	status, _, out = f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports",
		fmt.Sprintf(`{"reports":[{"attempt_id":%d,"report":{"state":"SUCCEEDED","exit_code":0}}]}`, id))
	require.Equal(t, http.StatusOK, status, out)
	require.NotContains(t, out, "stop")

	_, err := f.db.Exec(`UPDATE workers SET state = 'dead' WHERE id = $1`, worker)
	require.NoError(t, err)
	status, _, out = f.do(t, http.MethodPost, "/v1/workers/"+worker+"/reports", body)
	require.Equal(t, http.StatusNotFound, status, "a dead worker re-registers: %v", out)
}

// placedAttempt starts a run (startedRun) and places its step a's task
// (assignA): it returns the run, the attempt and its worker.
func (f *controlFixture) placedAttempt(t *testing.T) (key domain.RunKey, id int64, worker string) {
	t.Helper()
	key = f.startedRun(t)
	id = f.assignA(t, key)
	require.NoError(t, f.db.QueryRow(`SELECT worker_id FROM attempts WHERE id = $1`, id).Scan(&worker))
	return key, id, worker
}

// A value nested 9,000 deep in a field whose schema is an allOf (the
// batch's heartbeat) answers 400 without kin-openapi writing the value
// into its error: that allocated 1.9 GB for this 18 KB body. Not parallel, so that the
// bytes allocated meanwhile are the request's.
func TestDeeplyNestedAllOfFieldIsCheap(t *testing.T) {
	f := newFixture(t)
	body := `{"reports":[],"heartbeat":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	status, _, out := f.do(t, http.MethodPost, "/v1/workers/"+uuid.NewString()+"/reports", body)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Contains(t, fields(out), "heartbeat")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(20<<20), "bytes allocated by the request")
}
