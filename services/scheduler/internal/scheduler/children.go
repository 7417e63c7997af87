package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// Sub-workflows (Temporal's child workflows): a workflow step starts child
// runs of a template in its run's transaction, follows their phases
// whenever its run advances (followChildren), retries a failed child within
// max_retries_failure, and takes their outputs when they all succeeded. A
// child's advance that moves its root pushes its parent's advance; the
// resync, which advances every unfinished run, heals a lost push.

// kinWork is what an advance leaves for after its commit about child runs.
type kinWork struct {
	// starts are the child runs it created: each gets run:start.
	starts []domain.RunKey
	// aborts are the roots of child runs it aborted (a failed step's
	// survivors): each gets its abort pushed.
	aborts []domain.ActionKey
	// parent is the run's parent run when the run is a child.
	parent *domain.RunKey
	// moved is set when the run's root moved, or it had ended: its parent's
	// advance is pushed.
	moved bool
}

// parentRun returns the key of a child run's parent run, nil for a run
// created through the API.
func parentRun(run store.Run) *domain.RunKey {
	p, ok := run.Parent()
	if !ok {
		return nil
	}
	return &p.RunKey
}

// afterKin pushes what an advance left about child runs, once committed. A
// lost push is healed: a QUEUED child and a parent are unfinished runs the
// resync advances; an aborted child's request is in Postgres, which the
// abort reconciler scans.
func (s *Scheduler) afterKin(ctx context.Context, k kinWork) {
	for _, key := range k.starts {
		if err := s.queue.Enqueue(ctx, queue.NewRunStartTask(key)); err != nil {
			s.log.Warn("enqueue child run start failed; the resync starts it", "run", key.String(), "err", err)
		}
	}
	for _, key := range k.aborts {
		s.enqueueAbort(ctx, key)
	}
	if k.parent != nil && k.moved {
		if err := s.queue.Enqueue(ctx, queue.NewRunAdvanceTask(*k.parent)); err != nil {
			s.log.Warn("enqueue parent run advance failed; the resync advances it", "run", k.parent.String(), "err", err)
		}
	}
}

// childStarts lists the children workflow step a of run starts: one,
// index 0, without an item; under for_each one per item of its list
// (forEachItems), its index the item's. reason says why there is no list.
func childStarts(ctx context.Context, tx *store.Store, run store.Run, a store.Action) (starts []domain.ChildStart,
	reason string, err error) {
	if a.Spec.ForEach == nil {
		return []domain.ChildStart{{Index: 0}}, "", nil
	}
	items, reason, err := forEachItems(ctx, tx, run, a)
	if err != nil || reason != "" {
		return nil, reason, err
	}
	values := domain.ItemValues(items)
	starts = make([]domain.ChildStart, len(values))
	for i := range values {
		starts[i] = domain.ChildStart{Index: i, Item: &values[i]}
	}
	return starts, "", nil
}

// nextStarts returns the starts of a workflow step that start now besides
// its retries: those whose index has no child in the current generation
// (current, every try in order), in index order, as many as its
// for_each.max_parallel leaves room for beside its live children and
// the retries (every one without max_parallel).
func nextStarts(step domain.Step, starts []domain.ChildStart, current []store.ChildRun, retries int) []domain.ChildStart {
	live := make(map[int]bool, len(current))
	for _, c := range current {
		live[c.Index] = !c.Phase.IsTerminal() // the latest of an index decides
	}
	room := len(starts)
	if step.ForEach != nil && step.ForEach.MaxParallel != nil {
		room = *step.ForEach.MaxParallel - retries
		for _, l := range live {
			if l {
				room--
			}
		}
	}
	var next []domain.ChildStart
	for _, st := range starts {
		if len(next) >= room {
			break
		}
		if _, started := live[st.Index]; !started {
			next = append(next, st)
		}
	}
	return next
}

// startChildStep starts workflow step a's children (startChildren): under
// for_each those of the first items its max_parallel allows. ended is the
// phase it ended in at once instead ("" when it started): SUCCEEDED, with
// empty arrays as outputs, over no item; FAILED, with the reason, when it
// has no list or cannot start its children.
func (s *Scheduler) startChildStep(ctx context.Context, tx *store.Store, run store.Run, a store.Action, adv *Advance,
	now time.Time) (ended domain.Phase, err error) {
	var tries map[int]int // generation 0 starts first: no child exists yet
	if a.Generation > 0 {
		if tries, err = nextTries(ctx, tx, runKeyOf(run), a.Name); err != nil {
			return "", err
		}
	}
	starts, reason, err := childStarts(ctx, tx, run, a)
	switch {
	case err != nil:
		return "", err
	case reason != "":
		return domain.PhaseFailed, tx.Actions().FailStep(ctx, keyOf(a), domain.Phase(a.Phase), reason, now)
	case len(starts) == 0:
		outputs := domain.GatherChildOutputs(a.Spec.Outputs, nil, true)
		return domain.PhaseSucceeded, tx.Actions().EndAtStart(ctx, keyOf(a), domain.Phase(a.Phase),
			domain.PhaseSucceeded, "", outputs, now)
	}
	failed, err := s.startChildren(ctx, tx, run, a, nextStarts(a.Spec, starts, nil, 0), tries, adv, now)
	if failed || err != nil {
		return domain.PhaseFailed, err
	}
	return "", nil
}

// startChildren creates the child runs of workflow step a of run (both
// locked by tx) for starts, under its generation, each QUEUED with run:start
// left in adv, and records them on the step; tries gives each index's
// next try (absent: 0). A step that cannot start them
// (its template is gone, a cycle, too deep, params that do not fit) FAILS
// with the reason, and ended is true.
func (s *Scheduler) startChildren(ctx context.Context, tx *store.Store, run store.Run, a store.Action,
	starts []domain.ChildStart, tries map[int]int, adv *Advance, now time.Time) (ended bool, err error) {
	ak := keyOf(a)
	nrs, reason, err := s.newChildren(ctx, tx, run, a, starts, tries)
	if err != nil {
		return false, err
	}
	if reason == "" {
		reason, err = s.nameChildren(ctx, tx, ak, nrs)
		if err != nil {
			return false, err
		}
	}
	if reason != "" {
		s.log.Info("workflow step cannot start its child", "action", ak.String(), "reason", reason)
		return true, tx.Actions().FailStep(ctx, ak, domain.Phase(a.Phase), reason, now)
	}
	if err := tx.Runs().CreateChildRuns(ctx, nrs); err != nil {
		return false, err
	}
	names := make([]string, len(nrs))
	for i, nr := range nrs {
		names[i] = nr.Key.Run
		adv.kin.starts = append(adv.kin.starts, nr.Key)
	}
	return false, tx.Actions().StartChildStep(ctx, ak, names, now)
}

// newChildren returns the child runs step a starts for starts, with
// tries (their names still ChildRunName's), or the reason it cannot.
func (s *Scheduler) newChildren(ctx context.Context, tx *store.Store, run store.Run, a store.Action,
	starts []domain.ChildStart, tries map[int]int) ([]store.NewRun, string, error) {
	runKey := runKeyOf(run)
	ref := a.Spec.Workflow
	if ref == nil {
		return nil, "the step names no workflow template", nil
	}
	t, err := tx.Templates().GetTemplate(ctx, store.TemplateKey{Project: a.Project, Domain: a.Domain, Name: ref.Name}, ref.Version)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "no workflow template " + ref.Describe() + " in " + a.Project + "/" + a.Domain, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read template %s: %w", ref.Name, err)
	}
	ancestors := []string{deref(run.WorkflowName)} // a run at depth 0 has no ancestors
	if run.Depth > 0 {
		if ancestors, err = tx.Runs().AncestorWorkflows(ctx, runKey); err != nil {
			return nil, "", fmt.Errorf("read ancestors: %w", err)
		}
	}
	if reason := a.Spec.CheckChildStart(t.Name, t.Spec, ancestors, run.Depth, a.Spec.ItemParam()); reason != "" {
		return nil, reason, nil
	}
	inputs, err := childInputs(ctx, tx, runKey, a.Spec)
	if err != nil {
		return nil, "", err
	}
	nrs := make([]store.NewRun, 0, len(starts))
	for _, st := range starts {
		nr, reason := childRun(run, a, t, inputs, st, tries[st.Index])
		if reason != "" {
			return nil, reason, nil
		}
		nrs = append(nrs, nr)
	}
	return nrs, "", nil
}

// childRun is the child run of index st of step a of run, with its try,
// or the reason it cannot be.
func childRun(run store.Run, a store.Action, t store.Template, inputs map[string]string, st domain.ChildStart,
	try int) (store.NewRun, string) {
	params, errs := a.Spec.ChildParams(t.Spec.Params, inputs, a.Spec.ItemParam(), st.Item)
	if len(errs) > 0 {
		return store.NewRun{}, fmt.Sprintf("child %d of template %s: %s", st.Index, t.Name, errs[0].Error())
	}
	if len(t.Spec.Params) == 0 {
		params = nil
	}
	keys, errs := t.Spec.AdmissionKeys(params, "workflow")
	if len(errs) > 0 {
		return store.NewRun{}, fmt.Sprintf("child %d of template %s: %s", st.Index, t.Name, errs[0].Error())
	}
	ak := keyOf(a)
	return store.NewRun{
		Key:    domain.RunKey{Project: a.Project, Domain: a.Domain, Run: domain.ChildRunName(run.Name, a.Name, st.Index, try)},
		Spec:   t.Spec,
		Params: params,
		Origin: store.RunOrigin{WorkflowName: t.Name, WorkflowVersion: t.Version},
		Keys:   keys,
		Child: &store.ChildOf{Parent: ak, Index: st.Index, Generation: a.Generation, Try: try,
			Depth: run.Depth + 1},
		SuspendedAt: run.SuspendRequestedAt,
	}, ""
}

// nameChildren gives each child whose ChildRunName another run has the
// AltChildRunName instead; the reason is set when that is taken too.
func (s *Scheduler) nameChildren(ctx context.Context, tx *store.Store, parent domain.ActionKey,
	nrs []store.NewRun) (string, error) {
	names := make([]string, 0, 2*len(nrs))
	for _, nr := range nrs {
		names = append(names, nr.Key.Run, domain.AltChildRunName(parent, nr.Child.Index, nr.Child.Try))
	}
	taken, err := tx.Runs().TakenRunNames(ctx, parent.Project, parent.Domain, names)
	if err != nil {
		return "", fmt.Errorf("check child run names: %w", err)
	}
	for i := range nrs {
		if !taken[nrs[i].Key.Run] {
			continue
		}
		alt := names[2*i+1]
		if taken[alt] {
			return fmt.Sprintf("the child run names %s and %s are taken", nrs[i].Key.Run, alt), nil
		}
		nrs[i].Key.Run = alt
	}
	return "", nil
}

// childInputs returns the values of a workflow step's inputs, by their
// names: its producers' outputs.
func childInputs(ctx context.Context, tx *store.Store, key domain.RunKey, step domain.Step) (map[string]string, error) {
	if len(step.Inputs) == 0 {
		return nil, nil
	}
	var producers []string
	for _, in := range step.Inputs {
		p, _ := in.Producer()
		producers = append(producers, p)
	}
	outs, err := tx.Actions().StepOutputs(ctx, key, producers)
	if err != nil {
		return nil, fmt.Errorf("read inputs: %w", err)
	}
	values := make(map[string]string, len(step.Inputs))
	for _, in := range step.Inputs {
		p, o := in.Producer()
		values[in.As] = outs[p][o]
	}
	return values, nil
}

// nextTries returns, by index, the try of the next child of a workflow
// step: how many children the index had before (0 when none).
func nextTries(ctx context.Context, tx *store.Store, key domain.RunKey, step string) (map[int]int, error) {
	kids, err := tx.Runs().StepChildren(ctx, key, []string{step})
	if err != nil {
		return nil, fmt.Errorf("read children: %w", err)
	}
	tries := map[int]int{}
	for _, c := range kids[step] {
		tries[c.Index] = c.Try + 1
	}
	return tries, nil
}

// following reports whether a step follows its children now: a started
// workflow step that has not ended and waits for nothing.
func following(a store.Action) bool {
	return a.Spec.Kind == domain.KindWorkflow && a.StartedAt != nil && !domain.Phase(a.Phase).IsTerminal() &&
		a.WaitingFor == nil
}

// followChildren moves each started workflow step of the run (steps, in
// place) as its children decide (domain.Step.DecideChildren), reading
// every such step's children in one statement.
func (s *Scheduler) followChildren(ctx context.Context, tx *store.Store, run store.Run, steps []store.Action,
	adv *Advance, now time.Time) error {
	var names []string
	for _, a := range steps {
		if following(a) {
			names = append(names, a.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	key := runKeyOf(run)
	kids, err := tx.Runs().StepChildren(ctx, key, names)
	if err != nil {
		return fmt.Errorf("read children of %d steps: %w", len(names), err)
	}
	for i := range steps {
		if a := &steps[i]; following(*a) {
			if err := s.followStep(ctx, tx, run, a, kids[a.Name], adv, now); err != nil {
				return fmt.Errorf("follow children of step %s: %w", a.Name, err)
			}
		}
	}
	return nil
}

// followStep applies what workflow step a's latest children (kids, every
// generation's) decide: retries of failed children, and its phase. It
// SUCCEEDS with the outputs gathered from its children; a failure goes
// through the step's failure policy (failStep), else FAILS it with the
// reason naming the child, and its live children are aborted.
func (s *Scheduler) followStep(ctx context.Context, tx *store.Store, run store.Run, a *store.Action,
	kids []store.ChildRun, adv *Advance, now time.Time) error {
	starts, reason, err := childStarts(ctx, tx, run, *a)
	if err != nil {
		return err
	}
	if reason != "" { // its list was there when it started: its producer ran again since
		from := domain.Phase(a.Phase)
		a.Phase = string(domain.PhaseFailed)
		return tx.Actions().FailStep(ctx, keyOf(*a), from, reason, now)
	}
	var views []domain.ChildView
	var current []store.ChildRun
	for _, c := range kids {
		if c.Generation == a.Generation {
			views = append(views, domain.ChildView{Index: c.Index, Name: c.Name, Phase: c.Phase, Tries: c.Tries})
			current = append(current, c)
		}
	}
	d := a.Spec.DecideChildren(len(starts), views)
	if d.Phase != domain.PhaseFailed {
		more := slices.DeleteFunc(slices.Clone(starts), func(st domain.ChildStart) bool { return !slices.Contains(d.Retry, st.Index) })
		more = append(more, nextStarts(a.Spec, starts, current, len(more))...)
		if len(more) > 0 {
			tries := make(map[int]int, len(kids))
			for _, c := range kids {
				tries[c.Index] = c.Try + 1
			}
			ended, err := s.startChildren(ctx, tx, run, *a, more, tries, adv, now)
			if err != nil || ended {
				a.Phase = string(domain.PhaseFailed)
				return err
			}
		}
	}
	from := domain.Phase(a.Phase)
	switch {
	case d.Phase == domain.PhaseSucceeded:
		outputs, err := childOutputs(ctx, tx, *a, len(starts), current)
		if err != nil {
			return err
		}
		if _, err := tx.Actions().SucceedChildStep(ctx, keyOf(*a), from, outputs, now); err != nil {
			return err
		}
	case d.Phase == domain.PhaseFailed:
		return s.failChildStep(ctx, tx, a, d, current, adv, now)
	case domain.CanMovePhase(from, d.Phase):
		if _, err := tx.Actions().SetActionPhase(ctx, keyOf(*a), from, d.Phase, now); err != nil {
			return err
		}
	default:
		return nil
	}
	a.Phase = string(d.Phase)
	return nil
}

// failChildStep fails workflow step a as d decided: its live children are
// aborted, then its failure policy applies (failStep: a retry of the whole
// step, or a pause), else it FAILS with d's reason.
func (s *Scheduler) failChildStep(ctx context.Context, tx *store.Store, a *store.Action, d domain.ChildrenDecision,
	current []store.ChildRun, adv *Advance, now time.Time) error {
	for _, c := range current {
		if c.Phase.IsTerminal() {
			continue
		}
		root := domain.RunKey{Project: a.Project, Domain: a.Domain, Run: c.Name}.Action(domain.RootActionName)
		_, err := tx.Aborts().AbortAction(ctx, root, "step "+a.Name+" of run "+a.RunName+" failed: "+d.Reason, store.CauseAborted)
		if err != nil && !errors.Is(err, store.ErrTerminal) {
			return fmt.Errorf("abort child run %s: %w", c.Name, err)
		}
		if err == nil {
			adv.kin.aborts = append(adv.kin.aborts, root)
		}
	}
	phase, err := s.failStep(ctx, tx, *a, now)
	if err != nil {
		return err
	}
	switch phase {
	case "":
		from := domain.Phase(a.Phase)
		a.Phase = string(domain.PhaseFailed)
		return tx.Actions().FailStep(ctx, keyOf(*a), from, d.Reason, now)
	case domain.PhasePaused:
		a.Phase, a.WaitingFor = string(phase), ptr(store.WaitResume)
	default:
		a.WaitingFor = ptr(store.WaitRetry)
	}
	return nil
}

// childOutputs gathers a SUCCEEDED workflow step's outputs from its n
// children of the current generation (domain.GatherChildOutputs): arrays
// in index order under for_each.
func childOutputs(ctx context.Context, tx *store.Store, a store.Action, n int, current []store.ChildRun) (map[string]string, error) {
	if len(a.Spec.Outputs) == 0 {
		return nil, nil
	}
	keys := make([]domain.RunKey, len(current))
	for i, c := range current {
		keys[i] = domain.RunKey{Project: a.Project, Domain: a.Domain, Run: c.Name}
	}
	outs, err := tx.Runs().RunOutputs(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("read outputs of %d children: %w", len(keys), err)
	}
	per := make([]map[string]string, n)
	for _, c := range current {
		if c.Index >= 0 && c.Index < n {
			per[c.Index] = outs[c.Name]
		}
	}
	return domain.GatherChildOutputs(a.Spec.Outputs, per, a.Spec.ForEach != nil), nil
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
