// Command capstan is Capstan's command-line client: push workflow
// templates, create runs of them (or of inline specs) with typed params,
// watch, inspect, abort, suspend, resume and restart runs, approve or
// reject approval steps, read attempt logs, manage schedules and event
// triggers, publish events, list workers, aborts and cache entries, and
// show or set a project's fair-share weight. It talks to the public API
// through the generated client in pkg/api. Its exit codes are exitHelp's.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		var lint *lintError
		if errors.As(err, &lint) {
			fmt.Fprintln(os.Stderr, lint.Error()) // a line per finding, as a compiler writes them
		} else {
			fmt.Fprintln(os.Stderr, "capstan:", oneLine(message(err)))
		}
		os.Exit(exitCode(err))
	}
}

// message is what the command prints of err: an unreachable API's error
// alone (the hint to set the API's address), else err's.
func message(err error) string {
	var unreach *unreachableError
	if errors.As(err, &unreach) {
		return unreach.Error()
	}
	return err.Error()
}
