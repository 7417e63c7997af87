package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/capstan-run/capstan/pkg/domain"
)

// MaxHTTPBody is how much of a response body the http plugin keeps: 64 KiB,
// within an output value's bound (domain.MaxOutputValueBytes).
const MaxHTTPBody = 64 << 10

// HTTPBodyOutput is the output the http plugin writes the response body to,
// when the step declares it.
const HTTPBodyOutput = "body"

// HTTP is the http plugin: it sends the step's request. A status in its
// success codes (default any 2xx) succeeds, the body (its first 64 KiB)
// becoming the output "body" when the step declares it; one in its wait
// codes is PhaseWaiting (code NotReady); a 5xx or a
// transport error is a retryable user failure (codes HTTPServerError,
// HTTPTransportError); any other status fails without retry (cause
// permanent, code HTTPClientError for a 4xx, else HTTPUnexpectedStatus).
// The request runs until it ends or Abort cancels it: an attempt's timeout
// is the control plane's abort.
type HTTP struct {
	// Client sends the requests. Default a client without a timeout.
	Client *http.Client
}

var _ Plugin = (*HTTP)(nil)

// request is the state of an attempt whose request is in flight.
type request struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when tr and err are set
	tr     Transition
	err    error
}

// Handle sends the request in the background, then observes it.
func (h *HTTP) Handle(ctx context.Context, t *Task) (Transition, error) {
	if st, ok := t.State.(*request); ok {
		select {
		case <-st.done:
			return st.tr, st.err
		case <-ctx.Done():
			return Transition{Phase: PhaseRunning}, nil
		}
	}
	spec := t.Spec.HTTP
	if spec == nil {
		return Transition{}, errors.New("http plugin without an http request")
	}
	reqCtx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(reqCtx, spec.MethodOrDefault(), spec.URL, strings.NewReader(spec.Body))
	if err != nil {
		cancel()
		return Transition{Phase: PhasePermanentFailure, Code: CodeInvalidPluginSpec, Err: err.Error()}, nil
	}
	for k, v := range spec.Headers {
		req.Header.Set(k, v)
	}
	if host, ok := spec.Headers["Host"]; ok {
		req.Host = host
	}
	st := &request{cancel: cancel, done: make(chan struct{})}
	t.State = st
	go func() {
		defer close(st.done)
		st.tr, st.err = h.send(req, *spec, t)
	}()
	return Transition{Phase: PhaseRunning}, nil
}

// send does the request and classifies its answer. Errors: the body output
// could not be written (a system failure).
func (h *HTTP) send(req *http.Request, spec domain.HTTPSpec, t *Task) (Transition, error) {
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		return Transition{Phase: PhaseRetryableFailure, Code: CodeHTTPTransportError,
			Err: fmt.Sprintf("%s %s: %v", req.Method, spec.URL, err), Stderr: []byte(err.Error() + "\n")}, nil
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxHTTPBody+1))
	if err != nil {
		return Transition{Phase: PhaseRetryableFailure, Code: CodeHTTPTransportError,
			Err: fmt.Sprintf("%s %s: read the body: %v", req.Method, spec.URL, err)}, nil
	}
	tr := statusTransition(spec, res.StatusCode, req.Method)
	tr.Truncated = len(body) > MaxHTTPBody
	body = body[:min(len(body), MaxHTTPBody)]
	tr.Stdout, tr.Stderr = body, []byte(res.Proto+" "+res.Status+"\n")
	if tr.Phase == PhaseSuccess && slices.Contains(t.Outputs, HTTPBodyOutput) && t.OutputsDir != "" {
		if err := writeBody(t, body); err != nil {
			return Transition{}, err
		}
	}
	return tr, nil
}

// writeBody writes the body output to t's outputs directory, a file of
// the attempt's user when it has one (a sandboxed attempt's outputs must
// be its own). No process of the attempt runs meanwhile.
func writeBody(t *Task, body []byte) error {
	path := filepath.Join(t.OutputsDir, HTTPBodyOutput)
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return fmt.Errorf("write the body output: %w", err)
	}
	if t.RunAs != nil {
		if err := os.Lchown(path, int(t.RunAs.UID), int(t.RunAs.GID)); err != nil {
			return fmt.Errorf("write the body output: %w", err)
		}
	}
	return nil
}

// statusTransition classifies a response's status for spec.
func statusTransition(spec domain.HTTPSpec, status int, method string) Transition {
	msg := fmt.Sprintf("%s %s: status %d %s", method, spec.URL, status, http.StatusText(status))
	switch {
	case spec.Succeeded(status):
		return Transition{Phase: PhaseSuccess}
	case spec.Waits(status):
		return Transition{Phase: PhaseWaiting, Code: CodeNotReady, Err: msg + " (a wait code: not ready yet)"}
	case status >= 500:
		return Transition{Phase: PhaseRetryableFailure, Code: CodeHTTPServerError, Err: msg}
	case status >= 400:
		return Transition{Phase: PhasePermanentFailure, Code: CodeHTTPClientError, Err: msg}
	}
	return Transition{Phase: PhasePermanentFailure, Code: CodeHTTPUnexpectedStatus, Err: msg}
}

// Abort cancels the request and waits until it returned or ctx ends.
// Errors: ctx's.
func (h *HTTP) Abort(ctx context.Context, t *Task) error {
	st, ok := t.State.(*request)
	if !ok {
		return nil
	}
	st.cancel()
	select {
	case <-st.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Finalize releases the request's context; nothing else is left.
func (h *HTTP) Finalize(_ context.Context, t *Task) error {
	if st, ok := t.State.(*request); ok {
		st.cancel()
	}
	return nil
}
