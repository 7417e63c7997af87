package main

import (
	"net/http"
	"strings"
	"testing"
)

const fairShare = "/v1/projects/demo/fair-share"

// fair-share get and set call the project's route and print its weight; a
// 422 names the field; set without --weight is a usage error.
func TestFairShareCommands(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{
		"GET " + fairShare: {http.StatusOK, `{"weight":1}`},
		"PUT " + fairShare: {http.StatusOK, `{"weight":4}`},
	})
	out, err := capstan(api, "fair-share", "get")
	if err != nil || out != "project demo weight 1\n" {
		t.Fatalf("get: %q, %v", out, err)
	}
	out, err = capstan(api, "fair-share", "set", "--weight", "4")
	if err != nil || out != "project demo weight set to 4\n" {
		t.Fatalf("set: %q, %v", out, err)
	}
	got := s.received()
	if len(got) != 2 || got[1].method != http.MethodPut || !equalJSON(got[1].body, map[string]any{"weight": 4}) {
		t.Fatalf("requests %+v", got)
	}
	if _, err := capstan(api, "fair-share", "set"); exitCode(err) != exitUsage {
		t.Errorf("set without --weight: %v, want a usage error", err)
	}

	_, bad := newRoutes(t, map[string]reply{"PUT " + fairShare: {http.StatusUnprocessableEntity,
		`{"type":"/problems/invalid","title":"Unprocessable","status":422,"code":"invalid","detail":"weight: must be between 1 and 1000, got 0",
		"errors":[{"field":"weight","message":"must be between 1 and 1000, got 0"}]}`}})
	if _, err := capstan(bad, "fair-share", "set", "--weight", "0"); err == nil || !strings.Contains(err.Error(), "weight") {
		t.Errorf("set --weight 0: %v, want the field named", err)
	}
}
