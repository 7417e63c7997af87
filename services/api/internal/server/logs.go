package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/labstack/echo/v4"
)

// AppendAttemptLogs stores output an executor ships while the attempt runs,
// in order, and bounds what the attempt keeps to Config.LogMaxBytes: past
// it the oldest chunks are dropped and a marker per stream stands for them.
// 400 for a chunk with NUL; 404 for an unknown attempt.
func (h *Handlers) AppendAttemptLogs(ctx context.Context, req workerapi.AppendAttemptLogsRequestObject) (workerapi.AppendAttemptLogsResponseObject, error) {
	id := int64(req.Id)
	chunks, bad, err := h.checkChunks(ctx, id, req.Body.Chunks, "chunks")
	switch {
	case err != nil:
		return nil, err
	case bad != nil:
		return asBadRequest[workerapi.AppendAttemptLogs400ApplicationProblemPlusJSONResponse](*bad), nil
	}
	err = h.store.InTx(ctx, func(tx *store.Store) error {
		return tx.Logs().AppendLogsBounded(ctx, id, chunks, h.cfg.LogMaxBytes)
	})
	if p, ok := problemFor(err, subject{kind: "attempt"}); ok && p.Status == http.StatusNotFound {
		return asNotFound[workerapi.AppendAttemptLogs404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("append %d log chunks of attempt %d: %w", len(chunks), id, err)
	}
	return workerapi.AppendAttemptLogs204Response{}, nil
}

// checkChunks checks chunks an executor ships of attempt id's output and
// returns them in the store's form, masked of the attempt's secrets; bad is
// the 400 problem of a chunk with NUL, naming it as field[i].data. Errors:
// reading the secrets.
func (h *Handlers) checkChunks(ctx context.Context, id int64, in []workerapi.LogChunk, field string) ([]store.NewLogChunk, *api.Problem, error) {
	secrets, err := h.store.Attempts().AttemptSecretValues(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("read secrets of attempt %d: %w", id, err)
	}
	chunks := make([]store.NewLogChunk, len(in))
	for i, c := range in {
		if strings.IndexByte(c.Data, 0) >= 0 { // the validator refuses \u0000 first; this guards a direct call
			const msg = "must not contain NUL"
			f := field + "[" + strconv.Itoa(i) + "].data"
			p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, f+": "+msg, domain.FieldError{Field: f, Message: msg})
			return nil, &p, nil
		}
		chunks[i] = store.NewLogChunk{Stream: string(c.Stream), Data: domain.MaskSecrets(c.Data, secrets)}
		h.metrics.payloads.Observe(obs.KindLogChunk, len(c.Data))
	}
	return chunks, nil, nil
}

// GetAttemptLogs returns one attempt's output: the chunks shipped while it
// ran, per stream, when there are any, else the bounded output of its final
// report. With follow=true it streams the chunks as server-sent events
// until the attempt ended (see logStream). Task indexes and attempt numbers
// are Postgres integers: a larger one names no attempt (404).
func (h *Handlers) GetAttemptLogs(ctx context.Context, req api.GetAttemptLogsRequestObject) (api.GetAttemptLogsResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	var a store.Attempt
	err := store.ErrNotFound // a number past int4 names no attempt
	if req.Task <= math.MaxInt32 && req.Attempt <= math.MaxInt32 && (req.Params.Generation == nil ||
		*req.Params.Generation <= math.MaxInt32) {
		a, err = h.store.Attempts().FindAttempt(ctx, key, req.Params.Generation, req.Task, req.Attempt)
	}
	if p, ok := problemFor(err, subject{kind: "attempt"}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetAttemptLogs404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("find attempt %d of task %d of action %s: %w", req.Attempt, req.Task, key, err)
	}
	if req.Params.Follow != nil && *req.Params.Follow {
		return h.newLogStream(ctx, a.ID, req.Params.Timestamps != nil && *req.Params.Timestamps), nil
	}
	chunks, err := h.store.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("read log chunks of attempt %d: %w", a.ID, err)
	}
	if len(chunks) > 0 {
		return joinChunks(chunks), nil
	}
	l, err := h.store.Logs().FinalAttemptLog(ctx, a.ID)
	if err != nil {
		return nil, fmt.Errorf("read final logs of attempt %d: %w", a.ID, err)
	}
	return api.GetAttemptLogs200JSONResponse{Stdout: l.Stdout, Stderr: l.Stderr, Truncated: l.Truncated}, nil
}

// joinChunks concatenates chunks per stream, a marker as its text; the
// logs are truncated when there is a marker.
func joinChunks(chunks []store.LogChunk) api.GetAttemptLogs200JSONResponse {
	var stdout, stderr strings.Builder
	truncated := false
	for _, c := range chunks {
		b := &stdout
		if c.Stream == string(workerapi.Stderr) {
			b = &stderr
		}
		b.WriteString(chunkText(c))
		truncated = truncated || c.IsMarker()
	}
	return api.GetAttemptLogs200JSONResponse{Stdout: stdout.String(), Stderr: stderr.String(), Truncated: truncated}
}

// chunkText is a chunk's output, or for a marker the line that says how
// much older output of its stream was dropped.
func chunkText(c store.LogChunk) string {
	if c.IsMarker() {
		return "[capstan: " + strconv.FormatInt(c.Dropped, 10) + " bytes of older " + c.Stream + " dropped]\n"
	}
	return c.Data
}

// lastEventIDKey carries a request's Last-Event-ID header in its context.
type lastEventIDKey struct{}

// withLastEventID is a strict-server middleware that puts the Last-Event-ID
// header of GetAttemptLogs in the request's context, where a resumed
// logs?follow=true stream reads where to start.
func withLastEventID(f api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
	if operationID != "GetAttemptLogs" {
		return f
	}
	return func(c echo.Context, req any) (any, error) {
		r := c.Request()
		if v := r.Header.Get("Last-Event-ID"); v != "" {
			c.SetRequest(r.WithContext(context.WithValue(r.Context(), lastEventIDKey{}, v)))
		}
		return f(c, req)
	}
}

// lastEventID is the seq a resumed stream starts after: the context's
// Last-Event-ID when it is a number, else 0.
func lastEventID(ctx context.Context) int64 {
	v, _ := ctx.Value(lastEventIDKey{}).(string)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
