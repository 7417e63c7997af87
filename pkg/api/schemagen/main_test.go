package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// root is the repository root, from this package's directory.
const root = "../../.."

// modeline is the yaml-language-server comment that names a file's schema.
var modeline = regexp.MustCompile(`(?m)^# yaml-language-server: \$schema=(\S+)$`)

// The committed schemas are what schemagen writes from the committed
// OpenAPI document.
func TestSchemasAreCurrent(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	require.NoError(t, run(filepath.Join(root, "openapi/capstan.yaml"), out))
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(out, f.name))
		require.NoError(t, err)
		want, err := os.ReadFile(filepath.Join(root, "schema", f.name))
		require.NoError(t, err, "schema/%s is missing: run make generate", f.name)
		require.Equal(t, string(want), string(got), "schema/%s is stale: run make generate", f.name)
	}
}

// Every example names its schema in a yaml-language-server modeline, and
// holds to it; a typo of a field does not.
func TestExamplesHoldToTheirSchemas(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(root, "examples", "*", "*.yaml"))
	require.NoError(t, err)
	paths = append(paths, more...)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		m := modeline.FindSubmatch(raw)
		require.NotNil(t, m, "%s names no schema in a yaml-language-server modeline", p)
		sch := compile(t, filepath.Join(filepath.Dir(p), string(m[1])))
		require.NoError(t, sch.Validate(decode(t, raw)), p)
	}
	sch := compile(t, filepath.Join(root, "schema", "workflow.json"))
	typo := []byte("steps:\n  - name: a\n    comand: echo hi\n")
	err = sch.Validate(decode(t, typo))
	require.Error(t, err, "a misspelt field is refused")
	require.Contains(t, err.Error(), "comand")
	bad := []byte("steps:\n  - name: a\n    command: echo hi\n    replicas: three\n")
	require.Error(t, sch.Validate(decode(t, bad)), "a value of the wrong type is refused")
}

func compile(t *testing.T, path string) *jsonschema.Schema {
	t.Helper()
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	sch, err := jsonschema.NewCompiler().Compile(abs)
	require.NoError(t, err)
	return sch
}

// decode reads YAML as the JSON values a validator takes.
func decode(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(raw, &v))
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	return out
}
