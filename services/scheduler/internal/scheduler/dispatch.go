package scheduler

import (
	"context"

	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

// dispatch pushes bound attempts to their workers, once their bind
// committed: one message for the attempts of one worker and one trace
// (traces: by task id; a step's replicas placed together), not one an
// attempt. The message carries what the executor needs to run each
// attempt (dispatchSpec), signed under the worker's dispatch key, so that
// it starts at once instead of reading the attempt from the api first,
// and runs nothing of a spec forged or altered in Redis. Without a
// control-plane key the messages carry ids alone. A push that fails is
// logged: the attempts are ASSIGNED in Postgres, and the resync dispatches
// them again.
func (s *Scheduler) dispatch(ctx context.Context, attempts []store.Assigned, traces map[int64]string) {
	s.metrics.placed.Add(float64(len(attempts)))
	// One Redis round trip per message: in parallel, so the last message of
	// a large pass does not wait for all the others' pushes.
	var g errgroup.Group
	g.SetLimit(dispatchers)
	for _, d := range dispatches(attempts, traces, s.cfg.ControlPlaneKey) {
		g.Go(func() error {
			ctx, span := obs.Tracer().Start(obs.WithTraceParent(ctx, d.trace), "dispatch attempts",
				trace.WithAttributes(attribute.Int64Slice("capstan.attempt_ids", d.ids),
					attribute.String("capstan.worker_id", d.worker)))
			defer span.End()
			if err := s.queue.Enqueue(ctx, queue.NewAttemptsRunTask(d.worker, d.ids, d.specs)); err != nil {
				s.log.Warn("dispatch failed", "attempt_ids", d.ids, "worker_id", d.worker, "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// dispatchers is how many dispatch messages a pass pushes at once.
const dispatchers = 8

// dispatch is one message of a pass: attempts for one worker, of tasks
// that share one trace, and the signed specs of those it may carry.
type dispatch struct {
	worker, trace string
	ids           []int64
	specs         []queue.SignedSpec
}

// dispatchSpec is the spec an attempt's dispatch carries, with a for_each
// task's item as its input, ok false for an attempt the executor must read
// from the api: its step has secret_env (secrets stay out of Redis) or
// inputs (resolved from other steps' outputs at the read, and up to 1 MiB).
func dispatchSpec(a store.Assigned) (workerapi.AttemptSpec, bool) {
	if len(a.Step.SecretEnv) > 0 || len(a.Step.Inputs) > 0 {
		return workerapi.AttemptSpec{}, false
	}
	spec, err := workerapi.NewAttemptSpec(a.ID, a.Number, a.Action(), a.TaskIdx, a.WorkerID, a.Step)
	workerapi.WithItem(&spec, a.Step, a.TaskItem)
	return spec, err == nil
}

// dispatches groups attempts by worker and trace (by task id), in the
// order of each group's first attempt, each spec it may carry signed
// under its worker's dispatch key of key (none with the zero key).
func dispatches(attempts []store.Assigned, traces map[int64]string, key workerkey.Key) []dispatch {
	var out []dispatch
	at := map[[2]string]int{}
	keys := map[string][]byte{}
	for _, a := range attempts {
		k := [2]string{*a.WorkerID, traces[a.TaskID]}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, dispatch{worker: k[0], trace: k[1]})
		}
		out[i].ids = append(out[i].ids, a.ID)
		spec, ok := dispatchSpec(a)
		if !ok || key.IsZero() {
			continue
		}
		if keys[k[0]] == nil {
			keys[k[0]] = key.DispatchKey(k[0])
		}
		if signed, err := queue.SignSpec(keys[k[0]], spec); err == nil {
			out[i].specs = append(out[i].specs, signed)
		}
	}
	return out
}
