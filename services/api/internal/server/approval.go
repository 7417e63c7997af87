package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// ApproveAction records the approval of an approval step that waits and
// pushes the run's advance; the scheduler ends the step SUCCEEDED. 409
// not_waiting_for_approval for anything else.
func (h *Handlers) ApproveAction(ctx context.Context, req api.ApproveActionRequestObject) (api.ApproveActionResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	a, p, err := h.decide(ctx, key, domain.DecisionApproved, req.Body)
	switch {
	case p != nil && p.Status == http.StatusNotFound:
		return asNotFound[api.ApproveAction404ApplicationProblemPlusJSONResponse](*p), nil
	case p != nil && p.Status == http.StatusConflict:
		return asConflict[api.ApproveAction409ApplicationProblemPlusJSONResponse](*p), nil
	case err != nil:
		return nil, err
	}
	return api.ApproveAction202JSONResponse(a), nil
}

// RejectAction records the rejection of an approval step that waits and
// pushes the run's advance; the scheduler fails the step with reason
// rejected. 409 not_waiting_for_approval for anything else.
func (h *Handlers) RejectAction(ctx context.Context, req api.RejectActionRequestObject) (api.RejectActionResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	a, p, err := h.decide(ctx, key, domain.DecisionRejected, req.Body)
	switch {
	case p != nil && p.Status == http.StatusNotFound:
		return asNotFound[api.RejectAction404ApplicationProblemPlusJSONResponse](*p), nil
	case p != nil && p.Status == http.StatusConflict:
		return asConflict[api.RejectAction409ApplicationProblemPlusJSONResponse](*p), nil
	case err != nil:
		return nil, err
	}
	return api.RejectAction202JSONResponse(a), nil
}

// decide records decision on the action, by the authenticated token (its
// id and name) with the body's by as a label and its comment, pushes the
// run's advance and returns the action as it now reads; p is the problem
// that answers a store sentinel (err is then set too).
func (h *Handlers) decide(ctx context.Context, key domain.ActionKey, decision string, body *api.ApprovalRequest) (
	api.Action, *api.Problem, error) {
	var who store.Decider
	if p, ok := principalFrom(ctx); ok {
		who.TokenID, who.TokenName = p.tokenID, p.name
	}
	var comment string
	if body != nil && body.By != nil {
		who.Label = *body.By
	}
	if body != nil && body.Comment != nil {
		comment = *body.Comment
	}
	_, err := decideApproval(ctx, h.store, key, decision, who, comment)
	if p, ok := problemFor(err, subject{kind: "action", name: key.String()}); ok {
		return api.Action{}, &p, err
	}
	if err != nil {
		return api.Action{}, nil, fmt.Errorf("record %s decision on action %s: %w", decision, key, err)
	}
	h.advance(ctx, key.RunKey)
	d, err := h.store.Actions().GetAction(ctx, key)
	if err != nil {
		return api.Action{}, nil, fmt.Errorf("read action %s: %w", key, err)
	}
	return toAction(d), nil, nil
}

// decideApproval records decision on approval step key, by who with
// comment, in one transaction: it locks the run, then the action
// (LockRunAction), checks that the decision may be recorded
// (domain.CheckApproval) and records it (RecordApproval). It returns the
// action as written. Errors: store.ErrNotFound, domain.ErrNotWaiting (also
// for a decision already made), domain.ErrUnknownDecision.
func decideApproval(ctx context.Context, st *store.Store, key domain.ActionKey, decision string, who store.Decider,
	comment string) (store.Action, error) {
	var act store.Action
	err := st.InTx(ctx, func(tx *store.Store) error {
		_, locked, err := tx.Actions().LockRunAction(ctx, key)
		if err != nil {
			return err
		}
		if err := domain.CheckApproval(approvalWait(locked), decision); err != nil {
			return err
		}
		act, err = tx.Actions().RecordApproval(ctx, locked, decision, who, comment)
		return err
	})
	return act, err
}

// approvalWait is what the approval rule reads of action a.
func approvalWait(a store.Action) domain.ApprovalWait {
	return domain.ApprovalWait{Kind: a.Kind, Phase: domain.Phase(a.Phase),
		WaitsForApproval: a.WaitingFor != nil && *a.WaitingFor == store.WaitApproval, Decided: a.Decision != nil}
}
