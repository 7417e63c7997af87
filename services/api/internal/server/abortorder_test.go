package server

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// abortPushes is a go-redis hook on the api's real Redis client: at each
// command that pushes to the abort queue, before it runs, it reads from
// Postgres (another connection: only what is committed) whether the
// action's abort is recorded, and appends the answer to seen.
type abortPushes struct {
	db   *sql.DB
	mu   sync.Mutex
	key  domain.ActionKey
	seen []bool
}

func (h *abortPushes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *abortPushes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(ctx, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *abortPushes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.check(ctx, cmds)
		return next(ctx, cmds)
	}
}

// check records, for a command that names the abort queue, whether the
// action's abort_requested_at is committed.
func (h *abortPushes) check(ctx context.Context, cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if !strings.Contains(redisArgs(cmd), "{"+queue.Abort+"}") {
			continue
		}
		h.mu.Lock()
		key := h.key
		h.mu.Unlock()
		var recorded bool
		err := h.db.QueryRowContext(ctx, `SELECT abort_requested_at IS NOT NULL FROM actions
			WHERE project = $1 AND domain = $2 AND run_name = $3 AND name = $4`,
			key.Project, key.Domain, key.Run, key.Action).Scan(&recorded)
		h.mu.Lock()
		h.seen = append(h.seen, err == nil && recorded)
		h.mu.Unlock()
	}
}

func redisArgs(cmd redis.Cmder) string {
	var b strings.Builder
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok {
			b.WriteString(s)
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// Flyte's AbortRun: "the system first updates the database using the
// ActionRepo" and "After the database is updated, the RunService pushes a
// task to the reconciler": when the api's push of action:abort reaches
// Redis, the abort is already committed in Postgres, so a reconciler that
// takes it at once finds it.
func TestAbortIsWrittenToPostgresBeforeItIsPushed(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	opt := redistest.New(t)
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	pushes := &abortPushes{db: f.db}
	rc.AddHook(pushes)
	client := asynq.NewClientFromRedisClient(rc)
	t.Cleanup(func() { client.Close(); rc.Close() })
	e := New(Deps{Store: f.store, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }}, Config{AdminToken: testAdminToken})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	api := &fixture{srv: srv, store: f.store, redis: opt}

	key := f.startedRun(t)
	pushes.key = key.Action(domain.RootActionName)
	status, _, out := api.do(t, http.MethodPost, runsPath+"/"+key.Run+"/abort", `{"reason":"enough"}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	pushes.mu.Lock()
	defer pushes.mu.Unlock()
	require.Equal(t, []bool{true}, pushes.seen, "one push, made once the abort was committed")
	d, err := f.store.Actions().GetAction(context.Background(), pushes.key)
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseAborted), d.Action.Phase)
}
