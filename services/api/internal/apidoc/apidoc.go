// Package apidoc serves Capstan's public API description and its reference
// page: GET /openapi.yaml is openapi/capstan.yaml as it is
// (static/openapi.yaml, the copy make generate writes), GET /openapi.json
// the same document as JSON, and /docs/ a page that renders it with Redoc's
// standalone bundle (static/docs/redoc.standalone.js with its licences,
// copied by make vendor-redoc from the npm package redoc that
// openapi/package.json pins). The worker API (openapi/worker.yaml), which
// only executors call, is not published. Nothing is fetched from elsewhere:
// every file is embedded in the api binary.
package apidoc

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"sync"

	"github.com/oasdiff/yaml"
)

//go:embed static
var static embed.FS

// YAML is the API description as openapi/capstan.yaml holds it.
func YAML() []byte {
	b, err := static.ReadFile("static/openapi.yaml")
	if err != nil {
		panic(err) // embedded at build: present by construction
	}
	return b
}

// JSON is the API description converted to JSON once, on first use.
// Errors: the description is not YAML that converts to JSON (its test
// fails first).
var JSON = sync.OnceValues(func() ([]byte, error) {
	b, err := yaml.YAMLToJSON(YAML())
	if err != nil {
		return nil, fmt.Errorf("convert openapi.yaml to JSON: %w", err)
	}
	return b, nil
})

// Docs serves the reference page's files (index.html and the Redoc
// bundle), relative to /docs/.
func Docs() http.Handler {
	sub, err := fs.Sub(static, "static/docs")
	if err != nil {
		panic(err)
	}
	return http.FileServer(http.FS(sub))
}
