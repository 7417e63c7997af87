package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// MaxHTTPBody is how much of a response body the http plugin keeps: 64 KiB,
// within an output value's bound (domain.MaxOutputValueBytes).
const MaxHTTPBody = 64 << 10

// HTTPBodyOutput is the output the http plugin writes the response body to,
// when the step declares it.
const HTTPBodyOutput = "body"

// MaxHTTPRedirects is how many redirects the http plugin follows; each
// target is checked as the first one is (HTTPAllow).
const MaxHTTPRedirects = 5

// DefaultHTTPTimeout bounds an http attempt whose step sets neither
// attempt_timeout nor timeout: its request, redirects and body included.
const DefaultHTTPTimeout = 5 * time.Minute

// HTTP is the http plugin: it sends the step's request. A status in its
// success codes (default any 2xx) succeeds, the body (its first 64 KiB)
// becoming the output "body" when the step declares it; one in its wait
// codes is PhaseWaiting (code NotReady); a 5xx or a
// transport error is a retryable user failure (codes HTTPServerError,
// HTTPTransportError); any other status fails without retry (cause
// permanent, code HTTPClientError for a 4xx, else HTTPUnexpectedStatus).
//
// It connects to no loopback, link-local or unspecified address (the
// resolved address each connection goes to, redirects included) unless
// Allow lists it: such a target fails the attempt as a user failure, code
// HTTPTargetRefused, naming the address. It follows at most
// MaxHTTPRedirects redirects (more: HTTPTooManyRedirects), connects
// directly (no proxy from the environment, which would hide the target),
// and gives the request the task's Timeout, else Timeout (past it:
// HTTPTimeout); an abort cancels it sooner. Its zero value is ready to
// use.
type HTTP struct {
	// Allow lists the refused targets the plugin may reach anyway (the
	// executor's CAPSTAN_HTTP_ALLOW). Default none.
	Allow HTTPAllow
	// Timeout bounds an attempt whose task gives no Timeout. Default
	// DefaultHTTPTimeout.
	Timeout time.Duration
	// Resolver resolves host names. Default net.DefaultResolver.
	Resolver *net.Resolver

	once   sync.Once
	client *http.Client
}

// httpClient returns the plugin's client, made on first use: one
// transport with the guarded dialer, the redirect limit, no proxy.
func (h *HTTP) httpClient() *http.Client {
	h.once.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DialContext = guardedDialer{allow: h.Allow, resolver: h.Resolver}.DialContext
		h.client = &http.Client{Transport: tr, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) > MaxHTTPRedirects {
				return errTooManyRedirects
			}
			return nil
		}}
	})
	return h.client
}

// errTooManyRedirects stops a request past MaxHTTPRedirects redirects.
var errTooManyRedirects = fmt.Errorf("stopped after %d redirects", MaxHTTPRedirects)

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
	timeout := cmp.Or(t.Timeout, h.Timeout, DefaultHTTPTimeout)
	reqCtx, cancel := context.WithTimeout(context.Background(), timeout)
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
		st.tr, st.err = h.send(req, *spec, t, timeout)
	}()
	return Transition{Phase: PhaseRunning}, nil
}

// send does the request, within timeout, and classifies its answer.
// Errors: the body output could not be written (a system failure).
func (h *HTTP) send(req *http.Request, spec domain.HTTPSpec, t *Task, timeout time.Duration) (Transition, error) {
	res, err := h.httpClient().Do(req)
	if err != nil {
		return transportFailure(req, spec, err, timeout, ""), nil
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxHTTPBody+1))
	if err != nil {
		return transportFailure(req, spec, err, timeout, "read the body: "), nil
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

// transportFailure is the user failure of a request that got no (whole)
// answer: a refused target (HTTPTargetRefused, naming it), too many
// redirects, past its timeout, or any other transport error.
func transportFailure(req *http.Request, spec domain.HTTPSpec, err error, timeout time.Duration, what string) Transition {
	var refused *TargetRefusedError
	code, msg := CodeHTTPTransportError, err.Error()
	switch {
	case errors.As(err, &refused):
		code, msg = CodeHTTPTargetRefused, refused.Error()
	case errors.Is(err, errTooManyRedirects):
		code, msg = CodeHTTPTooManyRedirects, errTooManyRedirects.Error()
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(req.Context().Err(), context.DeadlineExceeded):
		code, msg = CodeHTTPTimeout, fmt.Sprintf("no answer within %s (the step's attempt_timeout or timeout, else the executor's CAPSTAN_HTTP_TIMEOUT)", timeout)
	}
	return Transition{Phase: PhaseRetryableFailure, Code: code, Err: fmt.Sprintf("%s %s: %s%s", req.Method, spec.URL, what, msg),
		Stderr: []byte(err.Error() + "\n")}
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
