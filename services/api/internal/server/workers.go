package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/google/uuid"
)

// RegisterWorker registers an executor under a new identity. The answer,
// and no other, carries the worker's secrets: its token, and its executor
// credential and dispatch key, derived from the worker's new id under the
// control-plane key (package workerkey), of which Postgres keeps only the
// credential's SHA-256.
func (h *Handlers) RegisterWorker(ctx context.Context, req workerapi.RegisterWorkerRequestObject) (workerapi.RegisterWorkerResponseObject, error) {
	nw, errs := h.newWorker(ctx, req.Body)
	if len(errs) > 0 {
		return asUnprocessable[workerapi.RegisterWorker422ApplicationProblemPlusJSONResponse](apiProblem(http.StatusUnprocessableEntity,
			problem.CodeInvalid, errs[0].Field+": "+errs[0].Message, errs...)), nil
	}
	if h.cfg.ControlPlaneKey.IsZero() {
		return nil, errNoControlPlaneKey
	}
	credential := h.cfg.ControlPlaneKey.Credential(nw.ID)
	nw.CredentialSHA256 = workerkey.Digest(credential)
	w, err := h.store.Workers().RegisterWorker(ctx, nw)
	if err != nil {
		return nil, fmt.Errorf("register worker %q: %w", nw.Name, err)
	}
	out := toWorker(store.WorkerLoad{Worker: w}, h.cfg.WorkerGrace, time.Now())
	if out.Token, err = h.workerToken(ctx, w); err != nil {
		return nil, err
	}
	dispatchKey := workerkey.EncodeDispatchKey(h.cfg.ControlPlaneKey.DispatchKey(w.ID))
	out.ExecutorCredential, out.DispatchKey = &credential, &dispatchKey
	h.log.Info("worker registered", "worker_id", w.ID, "name", w.Name, "address", w.Address, "slots", w.Slots,
		"sandbox", w.Sandbox)
	return workerapi.RegisterWorker201JSONResponse(out), nil
}

// newWorker checks registration b and returns the worker it inserts, under
// a new id, or the fields that are invalid.
func (h *Handlers) newWorker(ctx context.Context, b *workerapi.RegisterWorkerRequest) (store.NewWorker, []domain.FieldError) {
	slots := 4
	if b.Slots != nil {
		slots = *b.Slots
	}
	var errs []domain.FieldError
	if slots < 1 || slots > 1024 {
		errs = append(errs, domain.FieldError{Field: "slots", Message: "must be between 1 and 1024"})
	}
	if u, err := url.Parse(b.Address); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, domain.FieldError{Field: "address", Message: "must be an http(s) URL with a host"})
	} else if msg := h.outsideWorkerCIDRs(ctx, u.Hostname()); msg != "" {
		errs = append(errs, domain.FieldError{Field: "address", Message: msg})
	}
	if b.Name == "" {
		errs = append(errs, domain.FieldError{Field: "name", Message: "is required"})
	}
	if len(errs) > 0 {
		return store.NewWorker{}, errs
	}
	nw := store.NewWorker{ID: uuid.NewString(), Name: b.Name, Address: b.Address, Slots: slots}
	if b.Labels != nil {
		nw.Labels = *b.Labels
	}
	if b.Sandbox != nil {
		nw.Sandbox = *b.Sandbox
	}
	if b.Resources != nil {
		if b.Resources.CpuMillis != nil {
			nw.Resources.CPUMillis = *b.Resources.CpuMillis
		}
		if b.Resources.MemoryBytes != nil {
			nw.Resources.MemoryBytes = *b.Resources.MemoryBytes
		}
	}
	return nw, nil
}

// Heartbeat records a worker's liveness and its draining flag, answers which
// of the attempts it holds must stop, and ends WORKER_FAILED the attempts it
// no longer holds (their final report was lost), queueing their evaluation.
// 404 tells an unknown, deleted or dead worker to re-register.
func (h *Handlers) Heartbeat(ctx context.Context, req workerapi.HeartbeatRequestObject) (workerapi.HeartbeatResponseObject, error) {
	stop, unknown, err := h.beat(ctx, req.Id.String(), req.Body)
	switch {
	case unknown != nil:
		return asNotFound[workerapi.Heartbeat404ApplicationProblemPlusJSONResponse](*unknown), nil
	case err != nil:
		return nil, err
	}
	return workerapi.Heartbeat200JSONResponse{Stop: stop}, nil
}

// beat records worker id's heartbeat b (nil: an empty one) and queues the
// evaluation of the attempts it lost. It returns the attempts to stop, or
// unknown, the 404 problem of a worker unknown or dead (it must
// re-register).
func (h *Handlers) beat(ctx context.Context, id string, b *workerapi.HeartbeatReport) (stop []int64, unknown *api.Problem,
	err error) {
	var held []int64
	draining := false
	if b != nil {
		if b.Attempts != nil {
			for _, a := range *b.Attempts {
				held = append(held, a.Id)
			}
		}
		draining = b.Draining != nil && *b.Draining
	}
	stop, lost, err := recordBeat(ctx, h.store, id, held, draining, time.Now().UTC())
	if p, ok := problemFor(err, subject{kind: "worker", name: id + " (re-register)"}); ok && p.Status == http.StatusNotFound {
		return nil, &p, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("record heartbeat of worker %s: %w", id, err)
	}
	h.evaluateLost(ctx, lost)
	return stop, nil, nil
}

// recordBeat records worker id's heartbeat in one transaction: of the
// attempts it holds (held), those to stop (StopList); then the attempts
// placed on it that it no longer holds, ended WORKER_FAILED at at as
// domain.LossOnBeat of its previous heartbeat declares them lost
// (LoseUnheldAttempts); then its last heartbeat, stamped with Postgres's
// clock, and its sticky draining flag (RecordBeat): attempts before the
// worker, as the lock order asks. Errors: store.ErrNotFound when the
// worker is unknown or dead (it must re-register).
func recordBeat(ctx context.Context, st *store.Store, id string, held []int64, draining bool, at time.Time) (
	stop []int64, lost []store.LostAttempt, err error) {
	err = st.InTx(ctx, func(tx *store.Store) error {
		previous, err := tx.Workers().LastHeartbeat(ctx, id)
		if err != nil {
			return err
		}
		if stop, err = tx.Workers().StopList(ctx, id, held); err != nil {
			return err
		}
		if lost, err = tx.Workers().LoseUnheldAttempts(ctx, id, held, domain.LossOnBeat(previous), at); err != nil {
			return err
		}
		return tx.Workers().RecordBeat(ctx, id, draining)
	})
	return stop, lost, err
}

// DeregisterWorker removes a leaving worker; attempts still live on it become
// WORKER_FAILED and are queued for evaluation.
func (h *Handlers) DeregisterWorker(ctx context.Context, req workerapi.DeregisterWorkerRequestObject) (workerapi.DeregisterWorkerResponseObject, error) {
	id := req.Id.String()
	lost, err := h.store.Workers().DeregisterWorker(ctx, id)
	if p, ok := problemFor(err, subject{kind: "worker", name: id}); ok && p.Status == http.StatusNotFound {
		return asNotFound[workerapi.DeregisterWorker404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("deregister worker %s: %w", id, err)
	}
	h.auth.forgetTokens() // its token went with it
	h.log.Info("worker deregistered", "worker_id", id, "lost", len(lost))
	h.evaluateLost(ctx, lost)
	return workerapi.DeregisterWorker204Response{}, nil
}

// evaluateLost queues the evaluation of attempts ended with their worker; a
// lost push is healed by the scheduler's resync.
func (h *Handlers) evaluateLost(ctx context.Context, lost []store.LostAttempt) {
	for _, l := range lost {
		h.log.Warn("attempt lost with its worker", "attempt_id", l.ID, "worker_id", l.WorkerID)
		if err := h.queue.Enqueue(ctx, queue.NewTaskEvaluateTask(l.ID)); err != nil {
			h.log.Warn("enqueue evaluation failed; the scheduler's resync evaluates it", "attempt_id", l.ID, "err", err)
		}
	}
}

// ListWorkers returns every registered worker with its load.
func (h *Handlers) ListWorkers(ctx context.Context, _ api.ListWorkersRequestObject) (api.ListWorkersResponseObject, error) {
	ws, err := h.store.Workers().ListWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out := api.WorkerList{Workers: make([]api.Worker, len(ws))}
	now := time.Now()
	for i, w := range ws {
		out.Workers[i] = toWorker(w, h.cfg.WorkerGrace, now)
	}
	return api.ListWorkers200JSONResponse(out), nil
}

// errNoControlPlaneKey fails a registration on an api without
// CAPSTAN_CONTROL_PLANE_KEY: it could give the worker no secrets.
var errNoControlPlaneKey = errors.New("register worker: the api has no control-plane key (CAPSTAN_CONTROL_PLANE_KEY)")

// workerToken mints the token a registered worker's heartbeats, reports and
// log appends carry: role worker, bound to w (deleted with it).
func (h *Handlers) workerToken(ctx context.Context, w store.Worker) (*string, error) {
	_, secret, err := h.store.Tokens().CreateToken(ctx, store.NewToken{Name: "worker " + w.Name, Role: RoleWorker, WorkerID: &w.ID})
	if err != nil {
		return nil, fmt.Errorf("mint the token of worker %s: %w", w.ID, err)
	}
	return &secret, nil
}

// outsideWorkerCIDRs returns why a worker address's host is refused, or ""
// when every address it resolves to (an IP literal, or a name looked up
// with a 2 s bound) is inside the configured worker networks.
func (h *Handlers) outsideWorkerCIDRs(ctx context.Context, host string) string {
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, err = net.DefaultResolver.LookupNetIP(lctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return fmt.Sprintf("host %q does not resolve", host)
		}
	}
	for _, a := range addrs {
		a = a.Unmap()
		if !slices.ContainsFunc(h.cfg.WorkerCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return fmt.Sprintf("%s is outside the worker networks (CAPSTAN_WORKER_CIDRS)", a)
		}
	}
	return ""
}
