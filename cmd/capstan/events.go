package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
)

// followEvents reads an event stream — run's when run is not "", else the
// project/domain's — and calls fn with each event (`end` included) until
// fn returns true or the run's stream ends (nil). It reads opened first
// when it is not nil (openEvents' answer from now), else opens the stream
// from its start. A stream that closes early is resumed with
// Last-Event-ID (one opened from now that sent no event yet, from now
// again). Errors: the API's answer when it is not a stream (a
// problemError), a transport error on connecting, ctx's.
func followEvents(ctx context.Context, c *api.ClientWithResponses, g *globals, run string, opened *http.Response,
	fn func(sseEvent) (stop bool)) error {
	last, fromNow := "", opened != nil
	for {
		resp := opened
		opened = nil
		if resp == nil {
			var err error
			if resp, err = openEvents(ctx, c, g, run, last, fromNow); err != nil {
				return err
			}
		}
		done := false
		_ = readEvents(resp.Body, func(ev sseEvent) bool {
			last = nonEmpty(ev.id, last)
			done = fn(ev) || ev.name == "end"
			return done
		})
		resp.Body.Close()
		if done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// openEvents opens the stream after the event id last; when last is "",
// from the start, or, for a project's stream when fromNow, after the newest
// stored event (start=now).
func openEvents(ctx context.Context, c *api.ClientWithResponses, g *globals, run, last string, fromNow bool) (*http.Response, error) {
	editor := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Accept", "text/event-stream")
		return nil
	}
	var lastID *string
	if last != "" {
		lastID = &last
	}
	var resp *http.Response
	var err error
	if run != "" {
		resp, err = c.WatchRunEvents(ctx, g.project, g.domain, run, &api.WatchRunEventsParams{LastEventID: lastID}, editor)
	} else {
		params := &api.WatchEventsParams{LastEventID: lastID}
		if fromNow && lastID == nil {
			params.Start = ptr(api.EventsStartNow)
		}
		resp, err = c.WatchEvents(ctx, g.project, g.domain, params, editor)
	}
	if err != nil {
		of := g.project + "/" + g.domain
		if run != "" {
			of = "run " + run
		}
		return nil, fmt.Errorf("watch events of %s: %w", of, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, apiError(resp.StatusCode, body)
	}
	return resp, nil
}

// decodeEvent decodes the RunEvent of ev.
func decodeEvent(ev sseEvent, e *api.RunEvent) error { return json.Unmarshal([]byte(ev.data), e) }
