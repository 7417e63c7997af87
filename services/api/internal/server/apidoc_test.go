package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// get fetches path from f's server with no token, not following
// redirects: its status, content type and body.
func (f *fixture) get(t *testing.T, path string) (int, string, []byte) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(f.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// TestServesTheAPIDescription: the description and its reference page are
// public; /openapi.yaml is openapi/capstan.yaml byte for byte and
// /openapi.json the same document; /docs/ loads the embedded Redoc bundle.
func TestServesTheAPIDescription(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	status, ctype, yamlBody := f.get(t, "/openapi.yaml")
	require.Equal(t, http.StatusOK, status, string(yamlBody))
	require.Equal(t, "application/yaml", ctype)
	source, err := os.ReadFile("../../../../openapi/capstan.yaml")
	require.NoError(t, err)
	require.True(t, bytes.Equal(source, yamlBody), "/openapi.yaml is not openapi/capstan.yaml: run make generate")

	status, ctype, jsonBody := f.get(t, "/openapi.json")
	require.Equal(t, http.StatusOK, status, string(jsonBody))
	require.Equal(t, "application/json", ctype)
	var fromJSON map[string]any
	require.NoError(t, json.Unmarshal(jsonBody, &fromJSON))
	var fromYAML map[string]any
	require.NoError(t, yaml.Unmarshal(yamlBody, &fromYAML))
	normalized, err := json.Marshal(fromYAML) // YAML's ints as JSON's numbers
	require.NoError(t, err)
	fromYAML = nil
	require.NoError(t, json.Unmarshal(normalized, &fromYAML))
	require.Equal(t, fromYAML, fromJSON)
	require.Equal(t, "Capstan API", fromJSON["info"].(map[string]any)["title"])

	status, _, _ = f.get(t, "/docs")
	require.Equal(t, http.StatusFound, status)
	status, ctype, page := f.get(t, "/docs/")
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.HasPrefix(ctype, "text/html"), ctype)
	require.Contains(t, string(page), `<script src="redoc.standalone.js">`)
	require.Contains(t, string(page), `spec-url="/openapi.json"`)
	require.NotContains(t, string(page), "//cdn")
	status, ctype, bundle := f.get(t, "/docs/redoc.standalone.js")
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.HasPrefix(ctype, "text/javascript"), ctype)
	require.Greater(t, len(bundle), 100_000, "the Redoc bundle")
}
