package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Advance is what AdvanceRun did.
type Advance struct {
	// Started lists the steps whose tasks were created.
	Started []string
	// Phase is the run's phase after the pass.
	Phase domain.Phase
}

// AdvanceRun moves a run's workflow forward in one transaction: it creates
// the step actions on first call (the run's expansion), creates the tasks of
// every step that may start now, marks the steps that never will SKIPPED, and
// sets the run's (a0's) phase, forward only. A terminal run is left alone.
// Errors: ErrNotFound.
func (s *Store) AdvanceRun(ctx context.Context, key domain.RunKey) (Advance, error) {
	var adv Advance
	err := s.InTx(ctx, func(tx *Store) error {
		var run Run
		if err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).Take(&run).Error; err != nil {
			return mapErr(err)
		}
		adv.Phase = domain.Phase(run.Phase)
		if adv.Phase.IsTerminal() {
			return nil
		}
		var spec domain.WorkflowSpec
		if err := json.Unmarshal(run.Spec, &spec); err != nil {
			return fmt.Errorf("run %s: spec: %w", key, err)
		}
		steps, err := tx.expand(ctx, key, spec)
		if err != nil {
			return err
		}
		status := make(map[string]domain.StepStatus, len(steps))
		for _, a := range steps {
			status[a.Name] = domain.StepStatus{Started: a.StartedAt != nil, Phase: domain.Phase(a.Phase)}
		}
		p := domain.Evaluate(spec, status)
		now := time.Now().UTC()
		for _, name := range p.Start {
			if err := tx.startStep(ctx, key, spec, name, now); err != nil {
				return err
			}
		}
		for _, name := range p.Skip {
			if err := tx.setActionPhase(ctx, key.Action(name), domain.PhaseQueued, domain.PhaseSkipped, now); err != nil {
				return err
			}
		}
		adv.Started = p.Start
		if domain.CanMovePhase(adv.Phase, p.Phase) {
			if err := tx.setActionPhase(ctx, key.Action(domain.RootActionName), adv.Phase, p.Phase, now); err != nil {
				return err
			}
			if err := tx.setRunPhase(ctx, key, p.Phase, now); err != nil {
				return err
			}
			adv.Phase = p.Phase
		}
		return nil
	})
	return adv, err
}

// expand inserts the step actions of a run if missing and returns them.
func (s *Store) expand(ctx context.Context, key domain.RunKey, spec domain.WorkflowSpec) ([]Action, error) {
	var steps []Action
	q := s.q(ctx).Where("project = ? AND domain = ? AND run_name = ? AND name <> ?", key.Project, key.Domain, key.Run,
		domain.RootActionName)
	if err := q.Find(&steps).Error; err != nil {
		return nil, mapErr(err)
	}
	if len(steps) == len(spec.Steps) {
		return steps, nil
	}
	root := domain.RootActionName
	rows := make([]Action, 0, len(spec.Steps))
	for _, st := range spec.Steps {
		raw, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		deps := st.DependsOn
		if deps == nil {
			deps = []string{}
		}
		rows = append(rows, Action{Project: key.Project, Domain: key.Domain, RunName: key.Run, Name: st.Name,
			ParentActionName: &root, Kind: st.Kind, Spec: raw, DependsOn: deps, Phase: string(domain.PhaseQueued), Version: 1})
	}
	if err := s.q(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	if err := s.event(ctx, key, domain.RootActionName, "run.expanded", map[string]any{"steps": len(rows)}); err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		// The caller holds the run's row lock, so no other expansion raced
		// this one: the rows inserted are the steps.
		return rows, nil
	}
	steps = steps[:0]
	return steps, mapErr(q.Find(&steps).Error)
}

// startStep creates the tasks of a step and marks its action started.
func (s *Store) startStep(ctx context.Context, key domain.RunKey, spec domain.WorkflowSpec, name string, now time.Time) error {
	var step domain.Step
	for _, st := range spec.Steps {
		if st.Name == name {
			step = st
		}
	}
	constraints, err := json.Marshal(step.Constraints)
	if err != nil {
		return err
	}
	if step.Constraints == nil {
		constraints = []byte("[]")
	}
	req := step.Request()
	var deadline *time.Time
	if d := step.SchedulingTimeoutDuration(); d > 0 {
		at := now.Add(d)
		deadline = &at
	}
	tasks := make([]Task, step.ReplicaCount())
	for i := range tasks {
		tasks[i] = Task{Project: key.Project, Domain: key.Domain, RunName: key.Run, ActionName: name, Idx: i,
			State: int16(domain.TaskPending), MaxRetriesFailure: step.RetriesFailure(),
			MaxRetriesPreemption: step.RetriesPreemption(), MaxSystemFailures: domain.DefaultMaxSystemFailures,
			Priority: int16(req.Priority), CPUMillis: req.Resources.CPUMillis, MemoryBytes: req.Resources.MemoryBytes,
			Constraints: constraints, Coscheduled: step.Coscheduled, TimeoutMs: step.TimeoutDuration().Milliseconds(),
			SchedulingDeadline: deadline, Version: 1}
	}
	if err := s.q(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&tasks, 500).Error; err != nil {
		return mapErr(err)
	}
	if err := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
		key.Project, key.Domain, key.Run, name).
		Updates(map[string]any{"started_at": now, "updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key, name, "action.started", map[string]any{"tasks": len(tasks)})
}

// setActionPhase moves an action from phase from to phase to if CanMovePhase
// allows it, and writes an event.
func (s *Store) setActionPhase(ctx context.Context, key domain.ActionKey, from, to domain.Phase, now time.Time) error {
	if !domain.CanMovePhase(from, to) {
		return nil
	}
	up := map[string]any{"phase": string(to), "updated_at": now, "version": gorm.Expr("version + 1")}
	if to.IsTerminal() {
		up["ended_at"] = now
	}
	res := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ? AND phase NOT IN ?",
		key.Project, key.Domain, key.Run, key.Action, terminalPhases()).Updates(up)
	if res.Error != nil || res.RowsAffected == 0 {
		return mapErr(res.Error)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": to})
}
