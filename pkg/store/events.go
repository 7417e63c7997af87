package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Every state change writes a run_events row in its transaction: the audit
// trail, and what a watcher of the run reads.

// event appends a run_events row for key's run.
func (s *Store) event(ctx context.Context, key domain.RunKey, action, typ string, data any) error {
	return s.eventFull(ctx, RunEvent{Project: key.Project, Domain: key.Domain, RunName: key.Run,
		ActionName: strPtr(action), Type: typ}, data)
}

// taskEvent appends a run_events row about task t (and attempt, when not 0).
func (s *Store) taskEvent(ctx context.Context, t Task, attemptID int64, typ string, data any) error {
	e := RunEvent{Project: t.Project, Domain: t.Domain, RunName: t.RunName, ActionName: &t.ActionName,
		TaskID: &t.ID, Type: typ}
	if attemptID != 0 {
		e.AttemptID = &attemptID
	}
	return s.eventFull(ctx, e, data)
}

// eventFull appends e with data as its JSON: in a transaction, to the rows
// InTx inserts before it commits; else at once.
func (s *Store) eventFull(ctx context.Context, e RunEvent, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	e.Data = raw
	if s.events == nil {
		// Outside a transaction: one of its own, which announces it.
		return s.InTx(ctx, func(tx *Store) error { return tx.eventFull(ctx, e, data) })
	}
	*s.events = append(*s.events, e)
	return nil
}

// flushEvents inserts the transaction's buffered events in one statement,
// in the order they were written, after announceEvents.
func (s *Store) flushEvents(ctx context.Context) error {
	if s.events == nil || len(*s.events) == 0 {
		return nil
	}
	if err := s.announceEvents(ctx, *s.events); err != nil {
		return err
	}
	err := s.q(ctx).Create(s.events).Error
	*s.events = nil
	return mapErr(err)
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
