package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// readDocuments reads path's documents, YAML or JSON, into values of T,
// refusing unknown fields: one per YAML document of the file (documents
// are separated by "---" lines; those with no content are skipped). what
// names a document in the error of a file that holds none ("workflow
// spec"). What the API requires of a document is lintFile's to check,
// before. Errors name the file, the document when there are several, and
// the line (of the file) or the field that is wrong; their callers make
// them usage errors.
func readDocuments[T any](path, what string) ([]T, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs := yamlDocuments(raw)
	var out []T
	for i, doc := range docs {
		where := path
		if len(docs) > 1 {
			where = fmt.Sprintf("%s: document %d", path, i+1)
		}
		js, err := yaml.YAMLToJSON(doc.raw)
		if err != nil {
			return nil, fmt.Errorf("%s: not valid YAML or JSON: %s", where, syntaxError(doc, err))
		}
		if string(bytes.TrimSpace(js)) == "null" {
			continue // only comments, or nothing, between two "---"
		}
		var v T
		if err := decodeStrict(js, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: holds no %s", path, what)
	}
	return out, nil
}

// decodeStrict decodes the JSON js into v, refusing unknown fields. The
// error names the field: `unknown field "x"`, or `steps.0.replicas: is a
// string, want a number`.
func decodeStrict(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%s: is a %s, want %s", te.Field, jsonValueName(te.Value), jsonTypeName(te.Type))
	case errors.As(err, &te):
		return fmt.Errorf("is a %s, want %s", jsonValueName(te.Value), jsonTypeName(te.Type))
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// jsonValueName names a JSON value's kind as UnmarshalTypeError.Value
// gives it ("string", "number", "bool", "array", "object", "number 1.5").
func jsonValueName(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	if kind == "bool" {
		return "boolean"
	}
	return kind
}

// timeType is time.Time's type, which JSON holds as an RFC 3339 string.
var timeType = reflect.TypeFor[time.Time]()

// jsonTypeName names the JSON a Go type decodes from, with its article.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return "an RFC 3339 time"
	case t.Kind() == reflect.Bool:
		return "a boolean"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return "an array"
	case t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return "an object"
	}
	return t.String()
}

// document is one YAML document of a file and the file's line it starts on.
type document struct {
	raw  []byte
	line int
}

// yamlDocuments splits raw at its document markers: lines that are "---"
// or start with "--- " (what follows the marker starts the next document,
// on the marker's line). A YAML block scalar is indented, so such a line
// is always a marker.
func yamlDocuments(raw []byte) []document {
	var docs []document
	cur := document{line: 1}
	for n, line := range bytes.SplitAfter(raw, []byte("\n")) {
		trimmed := strings.TrimRight(string(line), "\r\n")
		if trimmed == "---" || strings.HasPrefix(trimmed, "--- ") || strings.HasPrefix(trimmed, "---\t") {
			docs = append(docs, cur)
			cur = document{raw: []byte(trimmed[3:] + "\n"), line: n + 1}
			continue
		}
		cur.raw = append(cur.raw, line...)
	}
	return append(docs, cur)
}

// yamlLine finds the line a YAML parser's error names ("yaml: line 3: …").
var yamlLine = regexp.MustCompile(`^(?:error converting YAML to JSON: )?yaml: line (\d+): `)

// syntaxError is the YAML parser's error err of doc, its line counted in
// the file: "line 7: did not find expected node content".
func syntaxError(doc document, err error) string {
	msg := err.Error()
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	}
	n, _ := strconv.Atoi(m[1]) // digits
	return fmt.Sprintf("line %d: %s", doc.line+n-1, msg[len(m[0]):])
}
