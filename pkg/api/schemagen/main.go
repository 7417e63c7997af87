// Command schemagen writes the JSON Schemas of the files the capstan CLI
// reads (a workflow spec, a template, a schedule, a trigger) from the
// OpenAPI document, so an editor completes and checks them:
//
//	go run ./schemagen OPENAPI.yaml OUTDIR
//
// Each schema is JSON Schema 2020-12: the named component and every
// component it reaches, under $defs, with OpenAPI 3.0's nullable turned
// into a "null" type and its example into examples.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// files are the schemas written: file name → component → title.
var files = []struct{ name, component, title string }{
	{"workflow.json", "WorkflowSpec", "Capstan workflow spec (capstan run create -f)"},
	{"workflow-template.json", "PushWorkflowRequest", "Capstan workflow template (capstan workflow push -f)"},
	{"schedule.json", "CreateScheduleRequest", "Capstan schedule (capstan schedule create -f)"},
	{"trigger.json", "CreateTriggerRequest", "Capstan event trigger (capstan trigger create -f)"},
}

// baseID is where the schemas are published: the repository's schema/.
const baseID = "https://raw.githubusercontent.com/capstan-run/capstan/main/schema/"

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: schemagen OPENAPI.yaml OUTDIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(spec, out string) error {
	raw, err := os.ReadFile(spec)
	if err != nil {
		return err
	}
	var doc struct {
		Components struct {
			Schemas map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", spec, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		s, err := schemaOf(doc.Components.Schemas, f.component)
		if err != nil {
			return err
		}
		s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
		s["$id"] = baseID + f.name
		s["title"] = f.title
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, f.name), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// schemaOf returns the component name of schemas as a document of its own:
// its body, with every component it reaches (transitively) under $defs.
func schemaOf(schemas map[string]any, name string) (map[string]any, error) {
	seen := map[string]bool{}
	queue := []string{name}
	defs := map[string]any{}
	var root map[string]any
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if seen[n] {
			continue
		}
		seen[n] = true
		body, ok := schemas[n]
		if !ok {
			return nil, fmt.Errorf("component %s: not in the document", n)
		}
		conv, refs := convert(body)
		for _, r := range refs {
			if !seen[r] {
				queue = append(queue, r)
			}
		}
		if n == name {
			root, _ = conv.(map[string]any)
			continue
		}
		defs[n] = conv
	}
	if root == nil {
		return nil, fmt.Errorf("component %s: not an object schema", name)
	}
	if len(defs) > 0 {
		root["$defs"] = defs
	}
	return root, nil
}

// convert turns an OpenAPI 3.0 schema value into JSON Schema 2020-12 and
// returns the components its $refs name.
func convert(v any) (any, []string) {
	var refs []string
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, val := range x {
				switch {
				case strings.HasPrefix(k, "x-"), k == "discriminator", k == "nullable":
					continue
				case k == "$ref":
					ref, _ := val.(string)
					n, ok := strings.CutPrefix(ref, "#/components/schemas/")
					if ok {
						refs = append(refs, n)
						out[k] = "#/$defs/" + n
						continue
					}
					out[k] = ref
				case k == "example":
					out["examples"] = []any{walk(val)}
				case k == "properties" || k == "patternProperties" || k == "$defs":
					props, _ := val.(map[string]any)
					conv := make(map[string]any, len(props))
					for pk, pv := range props {
						conv[pk] = walk(pv)
					}
					out[k] = conv
				default:
					out[k] = walk(val)
				}
			}
			if nullable, _ := x["nullable"].(bool); nullable {
				switch t := out["type"].(type) {
				case string:
					out["type"] = []any{t, "null"}
				case nil:
					return map[string]any{"anyOf": []any{out, map[string]any{"type": "null"}}}
				}
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		}
		return v
	}
	out := walk(v)
	slices.Sort(refs)
	return out, slices.Compact(refs)
}
