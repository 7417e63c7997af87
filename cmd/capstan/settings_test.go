package main

import (
	"net/http"
	"strings"
	"testing"
)

const settingsRoute = "/v1/projects/demo/settings"

// settings get and set call the project's route and print its retention;
// set sends only the flags given; a 422 names the field.
func TestSettingsCommands(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{
		"GET " + settingsRoute: {http.StatusOK, `{}`},
		"PUT " + settingsRoute: {http.StatusOK, `{"retention":{"after_success":"2s","after_failure":"720h"}}`},
	})
	out, err := capstan(api, "settings", "get")
	if err != nil || out != "project demo retention: the server's defaults\n" {
		t.Fatalf("get: %q, %v", out, err)
	}
	out, err = capstan(api, "settings", "set", "--retention-after-success", "2s", "--retention-after-failure", "720h")
	if err != nil || out != "project demo retention after_success 2s, after_failure 720h\n" {
		t.Fatalf("set: %q, %v", out, err)
	}
	got := s.received()
	if len(got) != 2 || got[1].method != http.MethodPut || !equalJSON(got[1].body,
		map[string]any{"retention": map[string]any{"after_success": "2s", "after_failure": "720h"}}) {
		t.Fatalf("requests %+v", got)
	}

	_, bad := newRoutes(t, map[string]reply{"PUT " + settingsRoute: {http.StatusUnprocessableEntity,
		`{"type":"/problems/invalid","title":"Unprocessable","status":422,"code":"invalid","detail":"retention.after_success: must be a duration",
		"errors":[{"field":"retention.after_success","message":"must be a duration"}]}`}})
	if _, err := capstan(bad, "settings", "set", "--retention-after-success", "2d"); err == nil ||
		!strings.Contains(err.Error(), "retention.after_success") {
		t.Errorf("set a bad duration: %v, want the field named", err)
	}
}
