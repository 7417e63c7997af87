package reconciler

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerkey"
)

// maxReasonRunes is the executor API's maxLength for an abort reason; a
// longer one would be refused with 400 on every round.
const maxReasonRunes = 1000

// round is what one delivery round found.
type round struct {
	// requestedAt is the abort's abort_requested_at.
	requestedAt *time.Time
	// killed counts attempts whose executor confirmed the kill (200).
	killed int
	// gone counts attempts found already terminated, now recorded KILLED.
	gone int
}

// outcome is the result of delivering the abort to one live attempt.
type outcome int

const (
	outcomeKilled outcome = iota + 1
	outcomeGone
	outcomeFailed
)

// deliver asks the executor of every live attempt under key to kill it,
// records the attempts that were already gone, and returns the failures
// joined (nil when no live attempt is left).
func (r *Reconciler) deliver(ctx context.Context, key domain.ActionKey) (round, error) {
	var rd round
	action, err := r.store.GetAction(ctx, key)
	if err != nil {
		return rd, fmt.Errorf("get action: %w", err)
	}
	rd.requestedAt = action.Action.AbortRequestedAt
	reason := domain.DefaultAbortReason
	if action.Action.AbortReason != nil {
		reason = cmp.Or(truncate(*action.Action.AbortReason, maxReasonRunes), reason)
	}
	cause := store.CauseAborted
	if c := action.Action.AbortCause; c != nil && *c != "" {
		cause = *c
	}
	if err := r.cascade(ctx, key, reason, cause); err != nil {
		return rd, err
	}
	live, err := r.store.LiveAttemptsUnder(ctx, key)
	if err != nil {
		return rd, fmt.Errorf("list live attempts: %w", err)
	}
	results, errs := r.callAll(ctx, live, reason, cause)
	var gone []int64
	for i, o := range results {
		switch o {
		case outcomeKilled:
			rd.killed++
		case outcomeGone:
			gone = append(gone, live[i].ID)
		}
	}
	// Gone attempts are recorded even when others failed: no live row may
	// linger for a process that no longer exists.
	evaluate, err := r.store.MarkAttemptsGone(ctx, gone, cause)
	if err != nil {
		errs = append(errs, fmt.Errorf("mark attempts gone: %w", err))
	} else {
		rd.gone = len(gone)
		r.metrics.alreadyTerminated.WithLabelValues(kindAction).Add(float64(len(gone)))
	}
	for _, id := range evaluate {
		r.evaluate(ctx, id) // its evaluation completes the abort
	}
	return rd, errors.Join(errs...)
}

// cascade aborts, with the same cause, the root of every live child run of
// the action under key or of a step below it (Temporal's parent close
// policy: terminate), each recorded in Postgres by the store's AbortAction
// before its abort is pushed, so that each child's abort is delivered as
// any other, and reaches its own children in turn. A child that ended
// meanwhile is passed over. An abort that fails to record fails the round:
// the parent's request stays pending, and its next round (or, after a
// crash, the resync's scan) cascades again.
func (r *Reconciler) cascade(ctx context.Context, key domain.ActionKey, reason, cause string) error {
	children, err := r.store.LiveChildRuns(ctx, key)
	if err != nil {
		return fmt.Errorf("list live child runs: %w", err)
	}
	why := truncate("parent "+key.String()+" aborted: "+reason, maxReasonRunes)
	for _, c := range children {
		root := c.Action(domain.RootActionName)
		if _, err := r.store.AbortAction(ctx, root, why, cause); errors.Is(err, store.ErrTerminal) {
			continue
		} else if err != nil {
			return fmt.Errorf("abort child run %s: %w", c, err)
		}
		r.metrics.cascaded.Inc()
		if _, err := r.enqueue(ctx, queue.NewActionAbortTask(root, r.cfg.TaskMaxRetry())); err != nil {
			r.log.Warn("enqueue child run abort failed; the resync delivers it", "run", c.String(), "err", err)
		}
	}
	return nil
}

// callAll delivers the abort to every live attempt, at most CallConcurrency
// calls at a time. An attempt whose worker is gone is not called.
func (r *Reconciler) callAll(ctx context.Context, live []store.LiveAttempt, reason, cause string) ([]outcome, []error) {
	results := make([]outcome, len(live))
	errs := make([]error, len(live))
	now := r.now()
	sem := make(chan struct{}, r.cfg.CallConcurrency)
	var wg sync.WaitGroup
	for i, a := range live {
		if workerGone(a, now, r.cfg.WorkerGrace) {
			results[i] = outcomeGone
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = r.abortAttempt(ctx, a, reason, cause)
		})
	}
	wg.Wait()
	var failures []error
	for _, err := range errs {
		if err != nil {
			failures = append(failures, err)
		}
	}
	return results, failures
}

// abortAttempt calls POST {address}/v1/attempts/{id}/abort {reason, cause} within
// CallTimeout, authenticated to a's worker alone (credential). 200 means
// killed; a not-found answer means already gone; anything else (5xx,
// refused, 401, timeout), or no credential to send, is a failure.
func (r *Reconciler) abortAttempt(ctx context.Context, a store.LiveAttempt, reason, cause string) (outcome, error) {
	addr := *a.Address
	bearer, err := r.credential(a)
	if err != nil {
		return outcomeFailed, fmt.Errorf("attempt %d: %w", a.ID, err)
	}
	c, err := executorapi.NewClientWithResponses(addr, executorapi.WithHTTPClient(r.http),
		executorapi.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+bearer)
			return nil
		}))
	if err != nil {
		return outcomeFailed, fmt.Errorf("attempt %d: executor client for %q: %w", a.ID, addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	resp, err := c.AbortAttemptWithResponse(ctx, a.ID, executorapi.AbortAttemptJSONRequestBody{Reason: &reason, Cause: &cause})
	if err != nil {
		return outcomeFailed, fmt.Errorf("attempt %d: abort at %s: %w", a.ID, addr, err)
	}
	switch {
	case resp.StatusCode() == http.StatusOK:
		return outcomeKilled, nil
	case isAlreadyTerminated(resp):
		r.log.Debug("attempt already terminated", "attempt_id", a.ID, "status", resp.StatusCode())
		return outcomeGone, nil
	}
	return outcomeFailed, fmt.Errorf("attempt %d: abort at %s: executor answered %s%s", a.ID, addr, resp.Status(),
		problemText(resp))
}

// isAlreadyTerminated reports whether the executor's answer means the
// attempt no longer runs there. It takes Flyte's two cases
// (isAlreadyTerminated: a NotFound, or an Internal error whose message says
// "not found", a not-found forwarded) and the executor's own, each a
// problem the executor API describes, never a bare status: a 404 problem
// with code attempt_not_found (the executor holds no such attempt) or
// not_found, or a 500 problem with code internal whose detail contains
// "not found". Any other answer, a 404 page of a server that is no
// executor included, is a failure to retry: an address that points
// elsewhere must not end a live attempt. The dead or deregistered worker
// is a rule of its own (workerGone), decided before any call.
func isAlreadyTerminated(resp *executorapi.AbortAttemptResponse) bool {
	switch p := answerProblem(resp); {
	case p == nil:
		return false
	case resp.StatusCode() == http.StatusNotFound:
		return p.Code == problem.CodeAttemptNotFound || p.Code == problem.CodeNotFound
	case resp.StatusCode() == http.StatusInternalServerError:
		return p.Code == problem.CodeInternal && strings.Contains(deref(p.Detail), "not found")
	}
	return false
}

// answerProblem is the problem an executor's 404 or 500 answer carries, nil
// for an answer that is not application/problem+json.
func answerProblem(resp *executorapi.AbortAttemptResponse) *executorapi.Problem {
	return cmp.Or(resp.ApplicationproblemJSON404, resp.ApplicationproblemJSON500)
}

// workerGone reports whether a's worker can no longer hold a process, so the
// attempt counts as already terminated (Capstan's rule: an attempt on a
// worker that is dead or deregistered is already gone): the worker row is gone (no address), its
// state is not alive, or its last heartbeat is older than grace.
func workerGone(a store.LiveAttempt, now time.Time, grace time.Duration) bool {
	switch {
	case a.Address == nil || *a.Address == "":
		return true
	case a.WorkerState == nil || *a.WorkerState != store.WorkerAlive:
		return true
	case a.LastHeartbeatAt == nil:
		return true
	}
	return now.Sub(*a.LastHeartbeatAt) > grace
}

// problemText renders a problem answer as ": title: detail", or "".
func problemText(resp *executorapi.AbortAttemptResponse) string {
	p := answerProblem(resp)
	if p == nil {
		return ""
	}
	if p.Detail != nil {
		return ": " + p.Title + ": " + *p.Detail
	}
	return ": " + p.Title
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	runes := []rune(s)
	if len(runes) <= n {
		return s
	}
	return string(runes[:n])
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// errNoCredential fails a call to an executor the reconciler holds no
// credential of.
var errNoCredential = errors.New("no executor credential")

// credential returns the executor credential of a's worker, derived from
// the control-plane key and checked against the digest its registration
// stored, so that a call carries no secret but the one that worker's
// executor expects. Errors (wrapping errNoCredential): the reconciler has
// no key; the worker has no stored digest, or one another key derives (its
// executor must register again, or this reconciler's
// CAPSTAN_CONTROL_PLANE_KEY is not the api's).
func (r *Reconciler) credential(a store.LiveAttempt) (string, error) {
	switch {
	case r.cfg.ControlPlaneKey.IsZero():
		return "", fmt.Errorf("%w: the reconciler has no control-plane key", errNoCredential)
	case a.WorkerID == nil || len(a.CredentialSHA256) == 0:
		return "", fmt.Errorf("%w: worker %s registered none (its executor must register again)", errNoCredential,
			deref(a.WorkerID))
	}
	c := r.cfg.ControlPlaneKey.Credential(*a.WorkerID)
	if subtle.ConstantTimeCompare(workerkey.Digest(c), a.CredentialSHA256) != 1 {
		return "", fmt.Errorf("%w: worker %s registered under another control-plane key (CAPSTAN_CONTROL_PLANE_KEY "+
			"must be the api's; or its executor must register again)", errNoCredential, *a.WorkerID)
	}
	return c, nil
}
