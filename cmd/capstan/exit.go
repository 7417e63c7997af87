package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
)

// Exit codes of the capstan command (documented in the root help and the
// README).
const (
	// exitOK: the command did what it was asked; with --wait, the run
	// SUCCEEDED.
	exitOK = 0
	// exitFailed: with --wait (or run wait), the run ended in another phase;
	// any other failure not listed below.
	exitFailed = 1
	// exitUsage: wrong arguments or flags, or an unreadable input file.
	exitUsage = 2
	// exitAPI: the API refused the request (a problem+json answer) or could
	// not be reached.
	exitAPI = 3
	// exitTimeout: with --wait (or run wait, run wait-abort), what was
	// waited for did not happen within --timeout.
	exitTimeout = 4
)

// exitHelp is the help text on exit codes.
const exitHelp = `Exit codes:
  0  success (with --wait or run wait: the run SUCCEEDED)
  1  the run ended in another phase (FAILED, ABORTED, TIMED_OUT, ...); any other failure
  2  usage: wrong arguments or flags, an unreadable or invalid input file (capstan lint's findings)
  3  API or transport error: the API answered with a problem (shown as one line) or was unreachable
     (no answer within --request-timeout)
  4  with --wait, run wait or run wait-abort: what was waited for did not happen within --timeout`

// usageError is a mistake in the command line or its input files.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// problemError is a non-success answer of the API.
type problemError struct {
	status int
	msg    string
}

func (e *problemError) Error() string { return e.msg }

// exitCode maps err to the command's exit code.
func exitCode(err error) int {
	var ue usageError
	var te *waitTimeout
	var pe *problemError
	var unreach *unreachableError
	var ue2 *url.Error
	var ne net.Error
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue) || cobraUsage(err):
		return exitUsage
	case errors.As(err, &te):
		return exitTimeout
	case errors.As(err, &pe) || errors.As(err, &unreach) || errors.As(err, &ue2) || errors.As(err, &ne):
		return exitAPI
	}
	return exitFailed
}

// cobraUsage reports whether err is one of cobra's own command-line errors
// (an unknown command or flag, a missing required flag).
func cobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag(s)",
		"invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// runFailed: a run waited for ended in another phase than the one
// expected (exitFailed).
type runFailed struct {
	run   string
	phase api.Phase
}

func (e *runFailed) Error() string { return fmt.Sprintf("run %s ended %s", e.run, e.phase) }

// waitTimeout: what a command waited for did not happen within its
// --timeout (exitTimeout).
type waitTimeout struct {
	// what did not happen: "run r1 did not end in time (still RUNNING after 10m0s)".
	what string
}

func (e *waitTimeout) Error() string { return e.what }
