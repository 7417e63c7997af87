package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/google/uuid"
)

// Sentinels callers branch on.
var (
	// ErrUnknownWorker: the control plane does not know this worker (it never
	// did, forgot it or declared it dead); it must re-register.
	ErrUnknownWorker = errors.New("control plane does not know this worker")
	// ErrAttemptNotFound: the control plane has no such attempt.
	ErrAttemptNotFound = errors.New("attempt not found")
	// ErrRejected: the control plane answered 4xx; retrying will not help.
	ErrRejected = errors.New("rejected by the control plane")
)

// StatusError is an answer of the control plane that is not the expected one.
type StatusError struct {
	Op     string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %.200s", e.Op, e.Status, e.Body)
}

// Unwrap returns ErrRejected for a 4xx answer, so callers stop retrying.
func (e *StatusError) Unwrap() error {
	if e.Status >= 400 && e.Status < 500 {
		return ErrRejected
	}
	return nil
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// RequestTimeout bounds one HTTP request. Default 10s.
	RequestTimeout time.Duration
	// ReportTimeout bounds the retries of one report. Default 1m.
	ReportTimeout time.Duration
	// ReportBackoff is the first delay between report retries, doubled up to
	// 2s. Default 100ms.
	ReportBackoff time.Duration
	// Token is the worker bearer secret it registers with
	// (CAPSTAN_WORKER_TOKEN). Every other call carries the token the
	// registration answered, bound to the worker. "" sends none.
	Token string
}

// Client calls the Capstan api for the executor: it registers, heartbeats,
// reads attempts and reports them (with retries).
type Client struct {
	api *workerapi.ClientWithResponses
	cfg ClientConfig
	log *slog.Logger
	// bound is the token of the current registration (nil before one).
	bound atomic.Pointer[string]
	// worker is the id of the current registration (nil before one).
	worker atomic.Pointer[uuid.UUID]
	// secrets are the current registration's (nil before one).
	secrets atomic.Pointer[workerSecrets]
	// batch gathers reports into batches (see Report).
	batch reportBatcher
	// reads gathers reads of attempts (see Attempt).
	reads attemptReads
}

var _ supervisor.Reporter = (*Client)(nil)

// NewClient returns a Client of the api at baseURL, e.g.
// http://127.0.0.1:8080.
func NewClient(baseURL string, cfg ClientConfig, log *slog.Logger) (*Client, error) {
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 10*time.Second)
	cfg.ReportTimeout = cmp.Or(cfg.ReportTimeout, time.Minute)
	cfg.ReportBackoff = cmp.Or(cfg.ReportBackoff, 100*time.Millisecond)
	cl := &Client{cfg: cfg, log: log}
	c, err := workerapi.NewClientWithResponses(baseURL, workerapi.WithHTTPClient(&http.Client{Timeout: cfg.RequestTimeout,
		Transport: otelhttp.NewTransport(http.DefaultTransport, otelhttp.WithFilter(inTrace))}),
		workerapi.WithRequestEditorFn(cl.authorize))
	if err != nil {
		return nil, fmt.Errorf("api client: %w", err)
	}
	cl.api = c
	return cl, nil
}

// authorize sets a request's bearer token: the registration's for every
// call once registered, ClientConfig.Token for a registration.
func (c *Client) authorize(_ context.Context, req *http.Request) error {
	token := c.cfg.Token
	if b := c.bound.Load(); b != nil && !(req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/v1/workers")) {
		token = *b
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return nil
}

// inTrace reports whether a request to the api is made in a trace (an
// attempt's reports): only those get a span and carry the trace context; a
// heartbeat or a registration starts no trace of its own.
func inTrace(r *http.Request) bool { return trace.SpanContextFromContext(r.Context()).IsValid() }

// workerSecrets are what a registration answered worker, besides its
// token: the executor credential every call to this executor's API must
// carry, and the dispatch key its dispatched specs' MACs verify under.
type workerSecrets struct {
	worker      uuid.UUID
	credential  string
	dispatchKey []byte
}

// Register registers the executor as a new worker and returns its id; from
// then on the executor's API takes the registration's executor credential
// (ExecutorCredential) and its dispatched specs verify under its dispatch
// key (DispatchKey). Errors: ErrRejected (the request is invalid, or the
// answer carries no executor credential or no valid dispatch key: an api
// older than the executor), a transport error or a 5xx.
func (c *Client) Register(ctx context.Context, req workerapi.RegisterWorkerRequest) (uuid.UUID, error) {
	res, err := c.api.RegisterWorkerWithResponse(ctx, req)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("register: %w", err)
	}
	w := res.JSON201
	if w == nil {
		return uuid.UUID{}, &StatusError{"register", res.StatusCode(), string(res.Body)}
	}
	id, err := uuid.Parse(w.Id)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("register: worker id %q: %w", w.Id, err)
	}
	if w.ExecutorCredential == nil || *w.ExecutorCredential == "" || w.DispatchKey == nil {
		return uuid.UUID{}, fmt.Errorf("register: %w: the answer carries no executor credential or dispatch key",
			ErrRejected)
	}
	key, err := workerkey.DecodeDispatchKey(*w.DispatchKey)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("register: %w: %w", ErrRejected, err)
	}
	c.secrets.Store(&workerSecrets{worker: id, credential: *w.ExecutorCredential, dispatchKey: key})
	if t := w.Token; t != nil {
		c.bound.Store(t)
	}
	c.worker.Store(&id)
	return id, nil
}

// ExecutorCredential returns the executor credential of the current
// registration, "" before the first one: the bearer secret the executor's
// API requires of the control plane.
func (c *Client) ExecutorCredential() string {
	if s := c.secrets.Load(); s != nil {
		return s.credential
	}
	return ""
}

// DispatchKey returns the dispatch key of worker's registration while it
// is the current one, else nil.
func (c *Client) DispatchKey(worker uuid.UUID) []byte {
	if s := c.secrets.Load(); s != nil && s.worker == worker {
		return s.dispatchKey
	}
	return nil
}

// Heartbeat reports the held attempts and whether the worker is draining,
// and returns the attempts the control plane wants stopped. While reports
// wait for a batch, it rides along with the batch instead of making a
// request of its own (rideAlong). Errors:
// ErrUnknownWorker on 404, and on 401: the worker's token went with its
// record.
func (c *Client) Heartbeat(ctx context.Context, id uuid.UUID, held []supervisor.Held, draining bool) ([]int64, error) {
	type item = struct {
		Id    int64         `json:"id"`
		State api.TaskState `json:"state"`
	}
	items := make([]item, len(held))
	for i, h := range held {
		items[i] = item{Id: h.ID, State: h.State}
	}
	beat := workerapi.HeartbeatReport{Attempts: &items, Draining: &draining}
	if stop, rode, err := c.rideAlong(ctx, id, beat); rode {
		return stop, err
	}
	res, err := c.api.HeartbeatWithResponse(ctx, id, beat)
	switch {
	case err != nil:
		return nil, fmt.Errorf("heartbeat: %w", err)
	case res.StatusCode() == http.StatusNotFound || res.StatusCode() == http.StatusUnauthorized:
		return nil, ErrUnknownWorker
	case res.JSON200 == nil:
		return nil, &StatusError{"heartbeat", res.StatusCode(), string(res.Body)}
	}
	return res.JSON200.Stop, nil
}

// Deregister removes the worker from the control plane. A worker it does
// not know (404) is already gone: no error.
func (c *Client) Deregister(ctx context.Context, id uuid.UUID) error {
	res, err := c.api.DeregisterWorkerWithResponse(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("deregister: %w", err)
	case res.StatusCode() == http.StatusNoContent || res.StatusCode() == http.StatusNotFound:
		return nil
	}
	return &StatusError{"deregister", res.StatusCode(), string(res.Body)}
}
