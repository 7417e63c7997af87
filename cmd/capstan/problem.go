package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
)

// apiError renders a non-success response, problem+json or not, as one
// line: "STATUS CODE: DETAIL" (the field errors joined with "; " when there
// are several), or "HTTP STATUS: BODY". Its exit code is exitAPI.
func apiError(status int, body []byte) error {
	var p api.Problem
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "%d %s", p.Status, p.Code)
		switch {
		case p.Detail != nil:
			fmt.Fprintf(&b, ": %s", oneLine(*p.Detail))
		case p.Title != "":
			fmt.Fprintf(&b, ": %s", oneLine(p.Title))
		}
		if p.Errors != nil && len(*p.Errors) > 1 {
			var fields []string
			for _, e := range *p.Errors {
				fields = append(fields, oneLine(e.Field+": "+e.Message))
			}
			fmt.Fprintf(&b, " (%s)", strings.Join(fields, "; "))
		}
		if p.Status == http.StatusUnauthorized {
			b.WriteString(" (set CAPSTAN_TOKEN or --token to an API token)")
		}
		return &problemError{status: status, msg: b.String()}
	}
	return &problemError{status: status, msg: fmt.Sprintf("HTTP %d: %s", status, oneLine(strings.TrimSpace(string(body))))}
}

// oneLine joins s's lines with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
