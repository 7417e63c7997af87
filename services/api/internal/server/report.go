package server

import (
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerapi"
)

// Bounds of a report's cleanup steps (the OpenAPI schema's).
const (
	maxCleanupSteps      = 8
	maxCleanupErrorBytes = 4000
)

// checkReport validates what an executor reports besides its state and
// outputs: the cause (one of AttemptReportCause's, permanent included),
// the code (domain.ValidCode) and the cleanup steps (at most 8, each abort
// or finalize with its time, an error of at most 4000 bytes). Each problem
// names its field.
func checkReport(b *workerapi.ReportAttemptJSONRequestBody) []domain.FieldError {
	var errs []domain.FieldError
	if b.Cause != nil && !b.Cause.Valid() {
		errs = append(errs, domain.FieldError{Field: "cause",
			Message: "must be user, system, permanent, waiting, aborted, timeout, worker_lost or preempted"})
	}
	if b.Code != nil && !domain.ValidCode(*b.Code) {
		errs = append(errs, domain.FieldError{Field: "code", Message: fmt.Sprintf(
			"must be a letter then letters and digits, at most %d, e.g. InvalidPluginSpec", domain.MaxCodeBytes)})
	}
	if b.Cleanup == nil {
		return errs
	}
	if len(*b.Cleanup) > maxCleanupSteps {
		return append(errs, domain.FieldError{Field: "cleanup",
			Message: fmt.Sprintf("has %d steps; at most %d", len(*b.Cleanup), maxCleanupSteps)})
	}
	for i, c := range *b.Cleanup {
		field := fmt.Sprintf("cleanup[%d]", i)
		switch {
		case !c.Step.Valid():
			errs = append(errs, domain.FieldError{Field: field + ".step", Message: "must be abort or finalize"})
		case c.At.IsZero():
			errs = append(errs, domain.FieldError{Field: field + ".at", Message: "is required"})
		case c.Error != nil && len(*c.Error) > maxCleanupErrorBytes:
			errs = append(errs, domain.FieldError{Field: field + ".error",
				Message: fmt.Sprintf("is %d bytes; at most %d", len(*c.Error), maxCleanupErrorBytes)})
		}
	}
	return errs
}

// withFailure copies a report's code and cleanup steps into the store's
// report.
func withFailure(rep *store.Report, b *workerapi.ReportAttemptJSONRequestBody) {
	if b.Code != nil {
		rep.Code = *b.Code
	}
	if b.Cleanup == nil {
		return
	}
	for _, c := range *b.Cleanup {
		step := store.CleanupStep{Step: string(c.Step), At: c.At}
		if c.Error != nil {
			step.Error = *c.Error
		}
		rep.Cleanup = append(rep.Cleanup, step)
	}
}
