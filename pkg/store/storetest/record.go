package storetest

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// The api records what executors report: a test that needs heartbeats
// without the api records them here, with the same store statements and
// the same rules of pkg/domain, composed as the api composes them. Set-up
// only: the api's tests drive its own path.

// Beat is one heartbeat of a worker.
type Beat struct {
	// Held lists the attempts the worker holds.
	Held []int64
	// Draining is true once the executor is shutting down; it is sticky.
	Draining bool
	// At is when the beat arrived. Default time.Now().
	At time.Time
}

// BeatReply is what a heartbeat changed: the held attempts the worker must
// stop, and the attempts it lost, now WORKER_FAILED and to be evaluated.
type BeatReply struct {
	Stop []int64
	Lost []store.LostAttempt
}

// Heartbeat records worker id's heartbeat b in one transaction: the held
// attempts to stop (StopList), the attempts lost as domain.LossOnBeat of
// the previous heartbeat declares them (LoseUnheldAttempts), then the
// beat (RecordBeat). Errors: store.ErrNotFound when the worker is unknown
// or dead.
func Heartbeat(ctx context.Context, st *store.Store, id string, b Beat) (BeatReply, error) {
	at := b.At
	if at.IsZero() {
		at = time.Now()
	}
	at = at.UTC()
	var reply BeatReply
	err := st.InTx(ctx, func(tx *store.Store) error {
		previous, err := tx.Workers().LastHeartbeat(ctx, id)
		if err != nil {
			return err
		}
		if reply.Stop, err = tx.Workers().StopList(ctx, id, b.Held); err != nil {
			return err
		}
		if reply.Lost, err = tx.Workers().LoseUnheldAttempts(ctx, id, b.Held, domain.LossOnBeat(previous), at); err != nil {
			return err
		}
		return tx.Workers().RecordBeat(ctx, id, at, b.Draining)
	})
	return reply, err
}
