// Package server is the api's HTTP layer: the echo strict servers generated
// from openapi/capstan.yaml (the public API) and openapi/worker.yaml (the
// worker API executors call), request validation against both, problem+json
// errors, health, metrics, traces, the dashboard, and for operators the asynq
// queue UI (/queues/) and Go's profiler (/debug/pprof/).
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/api/internal/apidoc"
	"github.com/capstan-run/capstan/services/api/internal/feed"
	"github.com/capstan-run/capstan/services/api/internal/ui"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/hibiken/asynq"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
)

// Deps are the server's collaborators.
type Deps struct {
	Store    *store.Store
	Enqueuer *queue.Enqueuer
	Log      *slog.Logger
	Registry *prometheus.Registry
	// Ready reports whether Postgres and Redis answer (for /readyz).
	Ready func(context.Context) error
	// Stopping, closed when the api begins to shut down, ends the
	// logs?follow=true streams (their clients reconnect elsewhere) so that
	// they do not hold the graceful shutdown. Nil: never.
	Stopping <-chan struct{}
	// Feed wakes the event streams when run_events grow; its Run must be
	// running. Nil: a hub that never listens (streams re-read every 15 s).
	Feed *feed.Hub
	// Queues, when set, is the asynq queue UI (asynqmon, rooted at
	// QueuesPath), served under QueuesPath. Nil: not served.
	Queues http.Handler
	// Archive, when set, keeps each run a delete deletes, first, and
	// answers GET .../archived-runs/{run}. Nil: the archive is off.
	Archive *archive.Archive
}

// Operator paths: the asynq queue UI and Go's profiler.
const (
	QueuesPath = "/queues"
	PprofPath  = "/debug/pprof"
)

// Handlers implements api.StrictServerInterface and
// workerapi.StrictServerInterface.
type Handlers struct {
	store *store.Store
	queue *queue.Enqueuer
	log   *slog.Logger
	cfg   Config
	// stopping ends follow streams (Deps.Stopping).
	stopping <-chan struct{}
	// feed wakes event streams (Deps.Feed).
	feed *feed.Hub
	// metrics observes payload sizes and dispatch latency.
	metrics *metrics
	// auth is told of revocations, to forget the tokens it remembers.
	auth *authenticator
	// starts sends the scheduler the starts of runs created one by one.
	starts *runStarts
	// templates remembers the template versions creates read.
	templates *templateCache
	// archive keeps runs before they are deleted (Deps.Archive); nil
	// when off.
	archive *archive.Archive
}

var (
	_ api.StrictServerInterface       = (*Handlers)(nil)
	_ workerapi.StrictServerInterface = (*Handlers)(nil)
)

// New builds the echo server with every route, cfg's zero fields taking
// their defaults. cfg must pass Config.Validate, which main checks with the
// rest of the environment; New panics otherwise, as that is its caller's bug.
func New(d Deps, cfg Config) *echo.Echo {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = problem.EchoErrorHandler(d.Log)
	m := newMetrics(d.Registry)
	if d.Enqueuer != nil && d.Enqueuer.Payloads == nil {
		d.Enqueuer.Payloads = m.payloads // the api's queue payloads on its one histogram
	}
	// otelecho restores the request it was given once the handler returns:
	// the access log, which reads the caller's token from the request the
	// validator left, runs inside it.
	auth := newAuthenticator(d.Store, cfg, m.tokenLookups)
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	e.Use(middleware.Recover(), middleware.RequestID(),
		otelecho.Middleware("capstan-api", otelecho.WithSkipper(untraced)), accessLog(d.Log), m.middleware(),
		writeDeadline(cfg.WriteTimeout), ipRateLimit(newBuckets(cfg.IPRateLimit, cfg.IPRateBurst), auth.known),
		bodyLimit(cfg.MaxBodyBytes, max(cfg.MaxBodyBytes, maxReportBodyBytes)),
		validator(openAPISpec(), auth))

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", func(c echo.Context) error {
		if err := d.Ready(c.Request().Context()); err != nil {
			return echo.NewHTTPError(http.StatusServiceUnavailable, "not ready: "+err.Error())
		}
		return c.String(http.StatusOK, "ok\n")
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{})))
	e.GET("/", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/ui/") })
	e.GET("/ui", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/ui/") })
	e.GET("/ui/*", echo.WrapHandler(http.StripPrefix("/ui/", ui.Handler())))
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", apidoc.YAML()) })
	e.GET("/openapi.json", func(c echo.Context) error {
		b, err := apidoc.JSON()
		if err != nil {
			return err
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
	})
	e.GET("/docs", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/docs/") })
	e.GET("/docs/*", echo.WrapHandler(http.StripPrefix("/docs/", apidoc.Docs())))
	e.GET(PprofPath+"/*", echo.WrapHandler(svc.PprofHandler()))
	if d.Queues != nil {
		e.Any(QueuesPath, echo.WrapHandler(d.Queues))
		e.Any(QueuesPath+"/*", echo.WrapHandler(d.Queues))
	}

	h := &Handlers{store: d.Store, queue: d.Enqueuer, log: d.Log, cfg: cfg, stopping: d.Stopping, feed: d.Feed,
		metrics: m, auth: auth, templates: newTemplateCache(), archive: d.Archive}
	h.starts = &runStarts{enqueue: func(ctx context.Context, t *asynq.Task) error { return h.queue.Enqueue(ctx, t) }}
	if h.feed == nil {
		h.feed = feed.New("", 0, 0, d.Log)
	}
	api.RegisterHandlers(e, streamGate{ServerInterface: api.NewStrictHandler(h, []api.StrictMiddlewareFunc{withLastEventID}),
		slots: newStreamSlots(cfg.MaxStreams, cfg.MaxStreamsPerToken, m.streams)})
	workerapi.RegisterHandlers(e, workerapi.NewStrictHandler(h, nil))
	return e
}

// openAPISpec is the embedded openapi/capstan.yaml with openapi/worker.yaml
// merged in (servedSpec), matching any host, as the api checks requests
// against it:
//   - a batch's items (CreateRunsRequest.runs) are any object: CreateRuns
//     checks each against CreateRunsItem itself (batchItem), so that an item
//     that does not match fails alone and not the whole batch;
//   - a create's spec is a WorkflowSpec, not the WorkflowSpecRequest clients
//     see: the same fields and rules, with Step's defaults, which the
//     validator writes into the body, so that a run's or template's stored
//     spec holds every default.
func openAPISpec() *openapi3.T {
	spec, err := servedSpec()
	if err != nil {
		panic(fmt.Sprintf("embedded OpenAPI specs: %v", err))
	}
	spec.Servers = nil // match any host
	schemas := spec.Components.Schemas
	schemas["CreateRunsRequest"].Value.Properties["runs"].Value.Items = openapi3.NewObjectSchema().NewRef()
	for _, create := range []string{"CreateRunRequest", "CreateRunsItem", "PushWorkflowRequest"} {
		schemas[create].Value.Properties["spec"] = schemas["WorkflowSpec"]
	}
	return spec
}

// maxReportBodyBytes is the body limit of an attempt report (when
// Config.MaxBodyBytes is lower): a final report carries a task's outputs, up
// to domain.MaxTaskOutputBytes (1 MiB) of values, with its logs, and JSON
// may write one byte as six (\u003c). 8 MiB holds the worst case; at 1 MiB
// the final report of a task with large outputs would be refused, and lost.
const maxReportBodyBytes = 8 << 20

// maxReportBatchBodyBytes is the body limit of a report batch (POST
// /v1/workers/{id}/reports): executors cut their batches at half of it by
// a worst-case estimate, and a report alone of up to maxReportBodyBytes
// still fits.
const maxReportBatchBodyBytes = 2 * maxReportBodyBytes

// bodyLimit answers 413 to a request body over limit bytes (reportLimit for
// an attempt report, at least maxReportBatchBodyBytes for a batch of
// them). It reads through http.MaxBytesReader, not echo's
// BodyLimit, so that net/http learns the limit was hit and closes the
// connection: with echo's reader the unread rest of an oversized chunked
// body was parsed as the next request on the same connection (answered with
// a text/plain 400; behind a proxy that reuses connections, a
// request-smuggling hazard).
func bodyLimit(limit, reportLimit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			limit := limit
			switch {
			case isReport(req):
				limit = reportLimit
			case isReportBatch(req):
				limit = max(reportLimit, maxReportBatchBodyBytes)
			}
			if req.ContentLength > limit {
				return echo.ErrStatusRequestEntityTooLarge
			}
			req.Body = http.MaxBytesReader(c.Response().Writer, req.Body, limit)
			return next(c)
		}
	}
}

// isReportBatch reports whether req is a batch of reports,
// POST /v1/workers/{id}/reports.
func isReportBatch(req *http.Request) bool { return isPost(req, "workers", "reports") }

// isReport reports whether req is an attempt report,
// POST /v1/attempts/{id}/report.
func isReport(req *http.Request) bool { return isPost(req, "attempts", "report") }

// isPost reports whether req is POST /v1/<kind>/{id}/<verb>.
func isPost(req *http.Request, kind, verb string) bool {
	parts := strings.Split(req.URL.Path, "/")
	return req.Method == http.MethodPost && len(parts) == 5 && parts[1] == "v1" && parts[2] == kind &&
		parts[3] != "" && parts[4] == verb
}
