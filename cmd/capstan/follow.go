package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
)

// errStreamEnded: the stream closed before its `end` event (the server
// bounds a stream's life); the follower reconnects from the last event.
var errStreamEnded = errors.New("log stream closed before the attempt ended")

// logFollower follows one attempt's output (logs?follow=true).
type logFollower struct {
	c               *api.ClientWithResponses
	project, domain string
	run, action     string
	task, attempt   int
	params          api.GetAttemptLogsParams
	stdout, stderr  io.Writer
	lastID          string // the last event's id, to resume after
}

// follow writes stdout events to stdout and stderr events to stderr until
// the `end` event; a stream that closes before it is resumed with
// Last-Event-ID. Errors: the API's answer when it is not a stream, a
// transport error or a failed write.
func (f *logFollower) follow(ctx context.Context) error {
	yes := true
	f.params.Follow = &yes
	for {
		if err := f.once(ctx); !errors.Is(err, errStreamEnded) {
			return err
		}
	}
}

// once reads one stream from after lastID; it returns nil at `end` and
// errStreamEnded when the stream closed before it.
func (f *logFollower) once(ctx context.Context) error {
	resp, err := f.c.GetAttemptLogs(ctx, f.project, f.domain, f.run, f.action, f.task, f.attempt, &f.params,
		func(_ context.Context, req *http.Request) error {
			req.Header.Set("Accept", "text/event-stream")
			if f.lastID != "" {
				req.Header.Set("Last-Event-ID", f.lastID)
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("follow logs of attempt %d of task %d of %s/%s: %w", f.attempt, f.task, f.run, f.action, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return apiError(resp.StatusCode, body)
	}
	ended := false
	var werr error
	err = readEvents(resp.Body, func(ev sseEvent) bool {
		f.lastID = nonEmpty(ev.id, f.lastID)
		switch ev.name {
		case "stdout":
			_, werr = io.WriteString(f.stdout, ev.data)
		case "stderr":
			_, werr = io.WriteString(f.stderr, ev.data)
		case "end":
			ended = true
		}
		return ended || werr != nil
	})
	switch {
	case werr != nil:
		return fmt.Errorf("write logs: %w", werr)
	case err != nil:
		return fmt.Errorf("read log stream: %w", err)
	case !ended:
		return errStreamEnded
	}
	return nil
}
