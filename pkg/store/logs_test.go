package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// runningAttempt starts a one-step run and assigns its task; it returns the
// attempt.
func runningAttempt(t *testing.T, st *store.Store, name string) store.Attempt {
	t.Helper()
	key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}})
	storetest.StartSteps(t, st, key)
	w := registerWorker(t, st)
	a, ok, err := storetest.AssignTask(context.Background(), st, tasksOf(t, st, key, "s")[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	return a
}

// appendBounded appends chunks and bounds the attempt's output to maxBytes,
// in one transaction, as the api does.
func appendBounded(t *testing.T, st *store.Store, id, maxBytes int64, chunks ...store.NewLogChunk) int64 {
	t.Helper()
	var dropped int64
	require.NoError(t, st.InTx(context.Background(), func(tx *store.Store) error {
		total, err := tx.Logs().AppendLogChunks(context.Background(), id, chunks)
		if err != nil {
			return err
		}
		dropped, err = tx.Logs().DropLogChunksBefore(context.Background(), id, domain.LogCut(total, maxBytes))
		return err
	}))
	return dropped
}

func out(s string) store.NewLogChunk  { return store.NewLogChunk{Stream: "stdout", Data: s} }
func errs(s string) store.NewLogChunk { return store.NewLogChunk{Stream: "stderr", Data: s} }

// texts renders chunks as "stream:data", a marker as "stream:-N".
func texts(cs []store.LogChunk) []string {
	var outs []string
	for _, c := range cs {
		if c.IsMarker() {
			outs = append(outs, c.Stream+":-"+strconv.FormatInt(c.Dropped, 10))
			continue
		}
		outs = append(outs, c.Stream+":"+c.Data)
	}
	return outs
}

func TestLogChunksAreStoredInOrderAfterASeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	a := runningAttempt(t, st, "logs-order")

	require.Zero(t, appendBounded(t, st, a.ID, 100, out("one\n"), errs("warn\n"), out(""), out("two\n")))
	all, err := st.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"stdout:one\n", "stderr:warn\n", "stdout:two\n"}, texts(all), "empty chunks are skipped")
	require.Equal(t, []int64{0, 4, 9}, []int64{all[0].ByteOffset, all[1].ByteOffset, all[2].ByteOffset})

	rest, err := st.Logs().LogChunksAfter(ctx, a.ID, all[0].Seq, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"stderr:warn\n"}, texts(rest), "after a seq, limited")

	_, err = st.Logs().AppendLogChunks(ctx, a.ID+1000, []store.NewLogChunk{out("x")})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestLogChunksPastTheBoundLeaveAMarkerPerStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	a := runningAttempt(t, st, "logs-bound")

	ten := strings.Repeat("a", 10)
	require.Zero(t, appendBounded(t, st, a.ID, 30, out(ten), errs(ten), out(ten)))
	// 40 bytes shipped, 30 kept at most: the first chunk (0-10) goes.
	require.Equal(t, int64(10), appendBounded(t, st, a.ID, 30, out(ten)))
	all, err := st.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"stdout:-10", "stderr:" + ten, "stdout:" + ten, "stdout:" + ten}, texts(all),
		"the marker is in front of what is kept")

	// 55 shipped: everything that starts before 25 goes (10-20 and 20-30);
	// stdout's marker now counts 20 bytes, stderr gets its own.
	require.Equal(t, int64(20), appendBounded(t, st, a.ID, 30, errs(strings.Repeat("b", 15))))
	all, err = st.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"stderr:-10", "stdout:-20", "stdout:" + ten, "stderr:" + strings.Repeat("b", 15)},
		texts(all))

	// A chunk larger than the bound is dropped whole; the total still counts it.
	require.Equal(t, int64(25+40), appendBounded(t, st, a.ID, 30, out(strings.Repeat("c", 40))))
	all, err = st.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"stderr:-25", "stdout:-70"}, texts(all))
	total, err := st.Logs().AppendLogChunks(ctx, a.ID, nil)
	require.NoError(t, err)
	require.Equal(t, int64(95), total)
}

// LogTails reads each stream's last bytes, cut at a character boundary:
// from the chunks when the attempt shipped any (a marker's dropped bytes
// counted, the stream then cut), else from its final report (cut when the
// report was truncated); an attempt with neither has no entry.
func TestLogTails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	chunked, final, silent := runningAttempt(t, st, "tail-chunks"), runningAttempt(t, st, "tail-final"),
		runningAttempt(t, st, "tail-silent")

	appendBounded(t, st, chunked.ID, 30, out(strings.Repeat("a", 20)), errs("é1234567"), out("xyz"), out("é123456"))
	_, err := storetest.ReportAttempt(ctx, st, final.ID, store.Report{State: domain.TaskFailed, Stdout: "12é45678",
		Stderr: "short", Truncated: true})
	require.NoError(t, err)

	tails, err := st.Logs().LogTails(ctx, []int64{chunked.ID, final.ID, silent.ID}, 8)
	require.NoError(t, err)
	require.Equal(t, map[int64]store.LogTail{
		chunked.ID: {
			// 20 + 3 + 8 bytes shipped, 30 kept: the first chunk went;
			// stderr's last 8 bytes start inside its é.
			Stdout: store.StreamTail{Text: "é123456", Bytes: 20 + 3 + 8, Cut: true},
			Stderr: store.StreamTail{Text: "1234567", Bytes: 9, Cut: true}},
		final.ID: {
			Stdout: store.StreamTail{Text: "2é45678", Bytes: 9, Cut: true},
			Stderr: store.StreamTail{Text: "short", Bytes: 5, Cut: true}},
	}, tails)
}
