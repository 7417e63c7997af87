package domain

import (
	"fmt"
	"time"
)

// MaxRetention bounds a TTL: ten years.
const MaxRetention = 10 * 365 * 24 * time.Hour

// TTL is how long an ended run is kept before it is deleted (Argo's
// ttlStrategy), each a Go duration ("" = this layer does not say):
// AfterSuccess for a SUCCEEDED run, AfterFailure for one that ended any
// other way (FAILED, ABORTED, TIMED_OUT), AfterCompletion for either when
// its own field is unset. A run's spec, its project's settings and the
// server's defaults are three layers: the first that says anything about
// the run's outcome decides; when none does, the run is kept.
type TTL struct {
	AfterSuccess    string `json:"after_success,omitempty"`
	AfterFailure    string `json:"after_failure,omitempty"`
	AfterCompletion string `json:"after_completion,omitempty"`
}

// For returns how long this layer keeps a run that ended in phase p, and
// false when it does not say.
func (t *TTL) For(p Phase) (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	v := t.AfterFailure
	if p == PhaseSucceeded {
		v = t.AfterSuccess
	}
	if v == "" {
		v = t.AfterCompletion
	}
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	return d, err == nil
}

// Millis returns For(p) in milliseconds, nil when the layer does not say:
// what the runs and project_settings rows keep of it.
func (t *TTL) Millis(p Phase) *int64 {
	d, ok := t.For(p)
	if !ok {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// Validate names each field under prefix (e.g. "spec.ttl") that is not a
// duration from 0 to MaxRetention.
func (t *TTL) Validate(prefix string) []FieldError {
	if t == nil {
		return nil
	}
	var errs []FieldError
	for _, f := range []struct{ name, v string }{{"after_success", t.AfterSuccess},
		{"after_failure", t.AfterFailure}, {"after_completion", t.AfterCompletion}} {
		if d, err := time.ParseDuration(f.v); f.v != "" && (err != nil || d < 0 || d > MaxRetention) {
			errs = append(errs, FieldError{Field: prefix + "." + f.name, Message: fmt.Sprintf(
				"must be a duration such as \"2s\" or \"720h\", from 0 to %s; got %q", MaxRetention, f.v)})
		}
	}
	return errs
}
