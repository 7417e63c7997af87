package main

import (
	"net/http"
	"strings"
	"testing"
)

const tokenJSON = `{"id":"6f1c1a43-44d4-4a55-9d0e-7f0a1f9c2b10","name":"ci","role":"writer","projects":["team"],` +
	`"created_at":"2026-01-01T00:00:00Z","token":"cap_secret"}`

// token create posts its name, role and projects with the caller's token,
// and the secret comes out; revoke refuses a non-UUID before any request.
func TestTokenCommands(t *testing.T) {
	t.Parallel()
	s, api := newStandIn(t, http.StatusCreated, "application/json", tokenJSON)
	if _, err := capstan(api, "--token", "cap_admin", "token", "create", "ci", "--role", "writer", "--project", "team"); err != nil {
		t.Fatal(err)
	}
	got := s.received()
	if len(got) != 1 || got[0].method != http.MethodPost || got[0].path != "/v1/tokens" {
		t.Fatalf("requests %+v, want one POST /v1/tokens", got)
	}
	want := map[string]any{"name": "ci", "role": "writer", "projects": []any{"team"}}
	if !equalJSON(got[0].body, want) {
		t.Errorf("body %v, want %v", got[0].body, want)
	}
	if got[0].auth != "Bearer cap_admin" {
		t.Errorf("Authorization %q, want the --token", got[0].auth)
	}

	// -p is --project here too, as on every other command.
	if _, err := capstan(api, "--token", "cap_admin", "token", "create", "ci", "--role", "writer", "-p", "team"); err != nil {
		t.Fatal(err)
	}
	if got := s.received(); len(got) != 2 || !equalJSON(got[1].body, want) {
		t.Errorf("token create -p team: requests %+v, want a second POST with body %v", got, want)
	}

	_, err := capstan(api, "token", "revoke", "nope")
	if err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Errorf("revoke nope: %v", err)
	}
	if len(s.received()) != 2 {
		t.Error("a bad id is refused before any request")
	}
}

// A 401 says how to pass a token.
func TestUnauthorizedSaysHowToPassAToken(t *testing.T) {
	t.Parallel()
	_, api := newStandIn(t, http.StatusUnauthorized, "application/problem+json",
		`{"type":"/problems/unauthorized","title":"Unauthorized","status":401,"code":"unauthorized","detail":"a bearer token is required"}`)
	_, err := capstan(api, "token", "list")
	if err == nil || !strings.Contains(err.Error(), "CAPSTAN_TOKEN") {
		t.Errorf("token list: %v", err)
	}
}
