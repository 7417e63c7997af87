package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// defaultRequestTimeout is --request-timeout's default.
const defaultRequestTimeout = 30 * time.Second

// client returns the API client of g: every request carries g's token and
// is bounded by g's request timeout (see boundedDoer).
func (g *globals) client() (*api.ClientWithResponses, error) {
	doer := newBoundedDoer(g.apiURL, g.requestTimeout)
	c, err := api.NewClientWithResponses(g.apiURL, api.WithHTTPClient(doer),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if g.token != "" {
				req.Header.Set("Authorization", "Bearer "+g.token)
			}
			return nil
		}))
	if err != nil {
		return nil, usagef("--api %q: %v", g.apiURL, err)
	}
	return c, nil
}

// boundedDoer sends the CLI's requests. A request is bounded by timeout
// from its start to the end of its body's read, except a stream's (Accept:
// text/event-stream), whose body lasts as long as the stream: its connect,
// TLS handshake and response headers each are bounded by timeout instead.
// A request that fails in transport while its caller's context is live
// fails with an *unreachableError.
type boundedDoer struct {
	api     string
	timeout time.Duration
	client  *http.Client
}

func newBoundedDoer(apiURL string, timeout time.Duration) *boundedDoer {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = timeout
	tr.ResponseHeaderTimeout = timeout
	return &boundedDoer{api: apiURL, timeout: timeout, client: &http.Client{Transport: tr}}
}

// Do sends req; see boundedDoer.
func (d *boundedDoer) Do(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	cancel := context.CancelFunc(func() {})
	if req.Header.Get("Accept") != "text/event-stream" {
		var ctx context.Context
		ctx, cancel = context.WithTimeout(parent, d.timeout)
		req = req.WithContext(ctx)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		cancel()
		if parent.Err() != nil {
			return nil, err // the caller gave up: its own deadline or an interrupt
		}
		return nil, &unreachableError{api: d.api, timeout: d.timeout, err: err}
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases a request's deadline when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// unreachableError: a request to the API failed in transport (refused,
// unresolvable, no answer in time). Its exit code is exitAPI; main prints
// it alone, without what the command was doing.
type unreachableError struct {
	api     string
	timeout time.Duration
	err     error
}

func (e *unreachableError) Error() string {
	cause := e.err.Error()
	var ue *url.Error
	switch {
	case errors.As(e.err, &ue) && ue.Timeout():
		cause = fmt.Sprintf("no answer within %s (--request-timeout)", e.timeout)
	case errors.As(e.err, &ue):
		cause = ue.Err.Error()
	}
	return fmt.Sprintf("cannot reach the Capstan API at %s (set CAPSTAN_API or --api): %s", e.api, cause)
}

func (e *unreachableError) Unwrap() error { return e.err }
