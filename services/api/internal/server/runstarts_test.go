package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// A start sent alone goes at once as run:start; the starts sent while one
// is in flight go together in the next round, one runs:start message a
// project/domain.
func TestRunStartsGatherTheStartsSentMeanwhile(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t)
	client, insp := asynq.NewClient(rdb), asynq.NewInspector(rdb)
	t.Cleanup(func() { client.Close(); insp.Close() })
	enq := queue.NewEnqueuer(client, slog.New(slog.DiscardHandler))
	r := &runStarts{enqueue: func(ctx context.Context, t *asynq.Task) error { return enq.Enqueue(ctx, t) }}
	ctx := context.Background()
	pending := func() map[string][]string {
		tasks, err := insp.ListPendingTasks(queue.Scheduler)
		require.NoError(t, err)
		out := map[string][]string{}
		for _, task := range tasks {
			switch task.Type {
			case queue.TypeRunStart:
				var p queue.RunPayload
				require.NoError(t, json.Unmarshal(task.Payload, &p))
				out[task.Type] = append(out[task.Type], p.Project+"/"+p.Domain+"/"+p.Run)
			case queue.TypeRunsStart:
				var p queue.RunsPayload
				require.NoError(t, json.Unmarshal(task.Payload, &p))
				out[task.Type+" "+p.Project+"/"+p.Domain] = append(out[task.Type+" "+p.Project+"/"+p.Domain], p.Runs...)
			}
		}
		return out
	}

	// A round answers its starts before it finds the queue empty and
	// ends: idle waits for that.
	idle := func(msg string) {
		require.Eventually(t, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return !r.sending
		}, 10*time.Second, time.Millisecond, msg)
	}

	require.NoError(t, r.send(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "alone"}))
	require.Equal(t, map[string][]string{queue.TypeRunStart: {"p/d/alone"}}, pending())
	idle("the lone start's round ended")

	r.mu.Lock()
	r.sending = true // a round in flight
	r.mu.Unlock()
	var wg sync.WaitGroup
	keys := []domain.RunKey{{Project: "p", Domain: "d", Run: "a"}, {Project: "p", Domain: "d", Run: "b"},
		{Project: "q", Domain: "d", Run: "c"}, {Project: "p", Domain: "d", Run: "e"}}
	for _, k := range keys {
		wg.Go(func() { require.NoError(t, r.send(ctx, k)) })
	}
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.queue) == len(keys)
	}, 10*time.Second, time.Millisecond, "the starts queue behind the round in flight")
	go r.flush() // the round in flight ends
	wg.Wait()
	got := pending()
	require.ElementsMatch(t, []string{"a", "b", "e"}, got[queue.TypeRunsStart+" p/d"])
	require.ElementsMatch(t, []string{"p/d/alone", "q/d/c"}, got[queue.TypeRunStart], "alone in its project: run:start")
	require.Len(t, got, 2, fmt.Sprint(got))
	idle("the last round ended")
}
