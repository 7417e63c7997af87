package scheduler

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// maxJudgeRounds is how many advances of a run in a row decide its
// conditions from verdicts alone; the next evaluates them under the run's
// lock (within one decision's bounds, domain.MaxBatchTime). A round
// misses only when a step a condition reads changed between the
// evaluation and the next advance's lock.
const maxJudgeRounds = 3

// judging is how an advance decides its steps' conditions: from verdicts
// evaluated before its transaction, none evaluated under the run's locks
// (domain.EvaluateWith), or, from its round maxJudgeRounds on, by
// evaluating them there (domain.Evaluate). The zero value is a first
// round, without verdicts.
type judging struct {
	verdicts domain.Verdicts
	// round counts the advances in a row that needed verdicts before this
	// one.
	round int
}

// evaluate decides the progress of run from status.
func (j judging) evaluate(run store.Run, status map[string]domain.StepStatus) domain.Progress {
	suspended := run.SuspendRequestedAt != nil
	if j.round >= maxJudgeRounds {
		return domain.Evaluate(run.Spec, status, suspended, run.Params)
	}
	return domain.EvaluateWith(run.Spec, status, suspended, run.Params, j.verdicts)
}

// judgement is what an advance that lacked verdicts leaves for after its
// commit: the run and the status of its steps it decided from.
type judgement struct {
	key    domain.RunKey
	run    store.Run
	status map[string]domain.StepStatus
	round  int
}

// judgeAndAdvance evaluates, outside any transaction, the conditions adv
// needed (domain.ConditionVerdicts over the status it read), then
// advances the run again with those verdicts (advanceJudged), and returns
// adv with what that advance did: its steps started too, its phase. A
// failed advance is logged; the run keeps its undecided steps until its
// next advance (an event, the resync).
func (s *Scheduler) judgeAndAdvance(ctx context.Context, adv Advance) Advance {
	j := adv.judge
	start := time.Now()
	v := domain.ConditionVerdicts(j.run.Spec, j.status, j.run.SuspendRequestedAt != nil, j.run.Params)
	s.metrics.conditionSeconds.Observe(time.Since(start).Seconds())
	next, err := s.advanceJudged(ctx, j.key, judging{verdicts: v, round: j.round + 1})
	if err != nil {
		s.log.Warn("advance with evaluated conditions failed", "run", j.key.String(), "round", j.round+1, "err", err)
		return adv
	}
	next.Started = append(adv.Started, next.Started...)
	return next
}
