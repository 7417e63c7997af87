package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// openStream GETs path with token and returns the status, the response
// (its body open while a stream lasts) and cancel, which ends the request.
func (f *fixture) openStream(t *testing.T, token, path string) (int, *http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp.StatusCode, resp, cancel
}

// streamOperations are the operations the api serves (servedSpec) that answer
// text/event-stream.
func streamOperations(t *testing.T) []string {
	spec, err := servedSpec()
	require.NoError(t, err)
	var out []string
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			if ok := op.Responses.Status(http.StatusOK); ok != nil && ok.Value.Content.Get("text/event-stream") != nil {
				out = append(out, op.OperationID)
			}
		}
	}
	return out
}

// TestStreamsAreCappedPerTokenAndProcess: every operation that answers
// server-sent events holds a slot while its stream lasts; past
// MaxStreamsPerToken a token's next stream, and past MaxStreams anyone's,
// is 429 problem+json with Retry-After, while plain reads pass; a stream
// that ends gives its slot back.
func TestStreamsAreCappedPerTokenAndProcess(t *testing.T) {
	t.Parallel()
	f := newFixtureConfig(t, Config{MaxStreams: 3, MaxStreamsPerToken: 2})
	tok := newAuthTokens(t, f.store)
	id, logs := logsRun(t, f, "capped")
	f.report(t, id, `{"state":"RUNNING"}`)
	paths := map[string]string{"WatchEvents": "/v1/projects/demo/domains/dev/events",
		"WatchRunEvents": runsPath + "/capped/events", "GetAttemptLogs": logs + "?follow=true"}
	ops := streamOperations(t)
	require.NotEmpty(t, ops)
	for _, op := range ops {
		require.Contains(t, paths, op, "a stream operation this test does not open: cap it in streamGate")
	}

	status, _, _ := f.openStream(t, testAdminToken, paths["WatchEvents"])
	require.Equal(t, http.StatusOK, status)
	status, _, closeLogs := f.openStream(t, testAdminToken, paths["GetAttemptLogs"])
	require.Equal(t, http.StatusOK, status)
	for _, op := range ops {
		status, resp, _ := f.openStream(t, testAdminToken, paths[op])
		require.Equal(t, http.StatusTooManyRequests, status, "%s past the token's 2", op)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
	}
	status, _, p := f.doAs(t, testAdminToken, http.MethodGet, logs, "")
	require.Equal(t, http.StatusOK, status, "reading the logs is no stream: %v", p)

	status, _, _ = f.openStream(t, tok.reader, paths["WatchRunEvents"])
	require.Equal(t, http.StatusOK, status, "another token, the process's third")
	status, resp, _ := f.openStream(t, tok.writer, paths["WatchEvents"])
	require.Equal(t, http.StatusTooManyRequests, status, "past the process's 3")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	closeLogs()
	require.Eventually(t, func() bool {
		status, resp, _ := f.openStream(t, tok.writer, paths["WatchEvents"])
		if status != http.StatusOK {
			resp.Body.Close()
		}
		return status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "the ended stream's slot never came back")
}
