package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
)

// apiError renders a non-success response, problem+json or not, as an error.
func apiError(status int, body []byte) error {
	var p api.Problem
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "%d %s", p.Status, p.Code)
		if p.Detail != nil {
			fmt.Fprintf(&b, ": %s", *p.Detail)
		}
		if p.Errors != nil && len(*p.Errors) > 1 {
			for _, e := range *p.Errors {
				fmt.Fprintf(&b, "\n  %s: %s", e.Field, e.Message)
			}
		}
		if p.Status == http.StatusUnauthorized {
			b.WriteString("\n  (set CAPSTAN_TOKEN or --token to an API token)")
		}
		return fmt.Errorf("%s", b.String())
	}
	return fmt.Errorf("HTTP %d: %s", status, strings.TrimSpace(string(body)))
}
