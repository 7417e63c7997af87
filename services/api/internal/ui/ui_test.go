package ui

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// importRe finds the relative imports of an ES module, the dashboard's
// (import … from './x.js') and the vendored minified ones (from"./x.js").
var importRe = regexp.MustCompile(`(?:^|[;\s}])(?:import|export)\s*[^;'"]*?from\s*["'](\.{1,2}/[^"']+)["']`)

// TestModulesResolve: the browser loads the modules as they are, with no
// build step, so every relative import, the vendored modules' included,
// must name an embedded file.
func TestModulesResolve(t *testing.T) {
	t.Parallel()
	sub, err := fs.Sub(static, "static")
	require.NoError(t, err)
	n := 0
	vendored := 0
	require.NoError(t, fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".mjs")) {
			return err
		}
		src, err := fs.ReadFile(sub, p)
		require.NoError(t, err)
		for _, m := range importRe.FindAllStringSubmatch(string(src), -1) {
			target := path.Join(path.Dir(p), m[1])
			_, err := fs.Stat(sub, target)
			require.NoError(t, err, "%s imports %s", p, m[1])
			n++
			if strings.HasPrefix(p, "vendor/") {
				vendored++
			}
		}
		return nil
	}))
	require.Positive(t, n, "no import found: the pattern no longer matches the modules")
	require.Positive(t, vendored, "no import of a vendored module found: the pattern no longer matches them")
}

// TestPagesRenderInPlace: the pages draw through lit-html, which updates
// what changed in place; an innerHTML rebuild would replace the element
// that has the focus (a run link, a button) on every live update.
func TestPagesRenderInPlace(t *testing.T) {
	t.Parallel()
	sub, err := fs.Sub(static, "static")
	require.NoError(t, err)
	files, err := fs.Glob(sub, "js/*.js")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, p := range files {
		src, err := fs.ReadFile(sub, p)
		require.NoError(t, err)
		require.NotContains(t, string(src), ".innerHTML", p)
		require.NotContains(t, string(src), "insertAdjacentHTML", p)
	}
}

// TestServesModules: the page and its modules are served with the types a
// browser requires of a module script and a stylesheet.
func TestServesModules(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.StripPrefix("/ui/", Handler()))
	defer srv.Close()
	for file, ctype := range map[string]string{
		"":                                     "text/html",
		"js/app.js":                            "text/javascript",
		"vendor/dagre/dagre.esm.js":            "text/javascript",
		"style.css":                            "text/css",
		"vendor/dagre/LICENSE":                 "text/plain",
		"vendor/lit-html/lit-html.js":          "text/javascript",
		"vendor/lit-html/directives/repeat.js": "text/javascript",
		"vendor/lit-html/LICENSE":              "text/plain",
		"vendor/js-yaml/js-yaml.mjs":           "text/javascript",
		"vendor/js-yaml/LICENSE":               "text/plain",
		"js/theme.js":                          "text/javascript",
		"vendor/json-schema/index.js":          "text/javascript",
		"vendor/json-schema/LICENSE":           "text/plain",
		"schema/workflow.json":                 "application/json",
		"favicon.svg":                          "image/svg+xml",
	} {
		resp, err := http.Get(srv.URL + "/ui/" + file)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, file)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), ctype), "%s: %s", file, resp.Header.Get("Content-Type"))
		require.NotEmpty(t, body, file)
	}
}

// TestSchemaIsCurrent: the form checks specs against the copy of
// schema/workflow.json the dashboard serves; `make generate` writes both.
func TestSchemaIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("../../../../schema/workflow.json")
	require.NoError(t, err)
	got, err := fs.ReadFile(static, "static/schema/workflow.json")
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "static/schema/workflow.json differs from schema/workflow.json: run make generate")
}
