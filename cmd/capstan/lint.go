package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// finding is one problem lint found in a file: the file, its line (0 when
// unknown), the field's path (steps[2].comand) and what is wrong.
type finding struct {
	file    string
	line    int
	field   string
	message string
}

// lintError is the findings of files; its exit code is exitUsage. Its
// message is one "FILE:LINE: FIELD: MESSAGE" line per finding.
type lintError struct{ findings []finding }

func (e *lintError) Error() string {
	lines := make([]string, len(e.findings))
	for i, f := range e.findings {
		lines[i] = f.String()
	}
	return strings.Join(lines, "\n")
}

// String renders f as "FILE:LINE: FIELD: MESSAGE".
func (f finding) String() string {
	at := f.file
	if f.line > 0 {
		at += ":" + strconv.Itoa(f.line)
	}
	if f.field == "" {
		return at + ": " + f.message
	}
	return at + ": " + f.field + ": " + f.message
}

// lintKind is what a document of a file is: a spec (capstan run create
// -f), a template (capstan workflow push -f), a schedule (capstan schedule
// create -f) or a trigger (capstan trigger create -f), by its component of
// the embedded spec.
type lintKind string

const (
	kindSpec     lintKind = "WorkflowSpec"
	kindTemplate lintKind = "PushWorkflowRequest"
	kindSchedule lintKind = "CreateScheduleRequest"
	kindTrigger  lintKind = "CreateTriggerRequest"
)

// lintKindNames are the names `capstan lint --kind` takes, in the order of
// lintKindsByName, which gives their kinds.
var (
	lintKindNames   = []string{"spec", "template", "schedule", "trigger"}
	lintKindsByName = []lintKind{kindSpec, kindTemplate, kindSchedule, kindTrigger}
)

// guessKind is the kind of a document whose kind was not given, by its
// top-level keys: spec makes a template, event_key a trigger, cron or
// interval a schedule; anything else is a workflow spec.
func guessKind(top *yaml.Node) lintKind {
	switch {
	case mappingValue(top, "spec") != nil:
		return kindTemplate
	case mappingValue(top, "event_key") != nil:
		return kindTrigger
	case mappingValue(top, "cron") != nil || mappingValue(top, "interval") != nil:
		return kindSchedule
	}
	return kindSpec
}

// lintFile checks each document of path as the API would, offline: against
// the embedded OpenAPI schema of kind (guessKind's when kind is ""), then,
// when that passes, by the domain's rules the API applies that need no
// stored state (domain.WorkflowSpec.Validate, domain.NewTemplate,
// domain.ScheduleSpec.Validate, domain.CompileTrigger). Findings are a
// *lintError; an unreadable file another error.
func lintFile(path string, kind lintKind) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var found []finding
	for _, doc := range yamlDocuments(raw) {
		for _, f := range lintDocument(doc, kind) {
			f.file = path
			found = append(found, f)
		}
	}
	if len(found) > 0 {
		return &lintError{findings: found}
	}
	return nil
}

// lintDocument checks one document (see lintFile); an empty one passes.
func lintDocument(doc document, kind lintKind) []finding {
	var root yaml.Node
	if err := yaml.Unmarshal(doc.raw, &root); err != nil {
		return []finding{{message: "not valid YAML or JSON: " + syntaxError(doc, err)}}
	}
	if len(root.Content) == 0 {
		return nil
	}
	top := root.Content[0]
	if kind == "" {
		kind = guessKind(top)
	}
	l := &linter{top: top, offset: doc.line - 1}
	spec, err := embeddedSpec()
	if err != nil {
		return []finding{{message: "the embedded OpenAPI spec: " + err.Error()}}
	}
	schema := spec.Components.Schemas[string(kind)]
	l.unknownFields(top, schema, nil)
	js, err := sigsyaml.YAMLToJSON(doc.raw)
	if err != nil {
		return append(l.found, finding{message: "not valid YAML or JSON: " + syntaxError(doc, err)})
	}
	l.schemaErrors(js, schema.Value)
	if len(l.found) == 0 {
		l.domainErrors(js, kind)
	}
	return l.found
}

// linter collects the findings of one document.
type linter struct {
	top    *yaml.Node
	offset int // the file's line before the document's first
	found  []finding
}

// add records a finding at the field path names (its line from the node
// tree: the deepest node of the path the document holds).
func (l *linter) add(path []string, message string) {
	l.found = append(l.found, finding{line: l.line(path), field: fieldPath(path), message: message})
}

// line is the file's line of the node at path: the key's line for a
// mapping entry, the item's for a sequence's.
func (l *linter) line(path []string) int {
	n, line := l.top, l.top.Line
	for _, seg := range path {
		switch n.Kind {
		case yaml.MappingNode:
			k := mappingKey(n, seg)
			if k == nil {
				return line + l.offset
			}
			line, n = k.Line, mappingValue(n, seg)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(n.Content) {
				return line + l.offset
			}
			n = n.Content[i]
			line = n.Line
		default:
			return line + l.offset
		}
	}
	return line + l.offset
}

// unknownFields reports each mapping key of n that schema (an object that
// takes no other properties) does not declare, with the nearest declared
// name, and descends into the fields it declares.
func (l *linter) unknownFields(n *yaml.Node, ref *openapi3.SchemaRef, path []string) {
	if n == nil || ref == nil || ref.Value == nil {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		props, closed, extra := objectFields(ref.Value)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, at := n.Content[i].Value, append(slices.Clone(path), n.Content[i].Value)
			switch p, ok := props[key]; {
			case ok:
				l.unknownFields(n.Content[i+1], p, at)
			case extra != nil:
				l.unknownFields(n.Content[i+1], extra, at)
			case closed:
				l.add(at, "unknown field"+didYouMean(key, props))
			}
		}
	case yaml.SequenceNode:
		items := ref.Value.Items
		for _, alt := range alternatives(ref.Value) {
			items = cmpOr(items, alt.Value.Items)
		}
		for i, item := range n.Content {
			l.unknownFields(item, items, append(slices.Clone(path), strconv.Itoa(i)))
		}
	}
}

// objectFields are the properties schema declares (with those of its
// allOf, oneOf and anyOf), whether it refuses others, and the schema of
// the others when it takes them (a map's values).
func objectFields(s *openapi3.Schema) (props map[string]*openapi3.SchemaRef, closed bool, extra *openapi3.SchemaRef) {
	props = map[string]*openapi3.SchemaRef{}
	closed = s.AdditionalProperties.Has != nil && !*s.AdditionalProperties.Has
	extra = s.AdditionalProperties.Schema
	for _, one := range append([]*openapi3.Schema{s}, values(alternatives(s))...) {
		for name, p := range one.Properties {
			props[name] = p
		}
		if one.AdditionalProperties.Has != nil && !*one.AdditionalProperties.Has {
			closed = true
		}
		extra = cmpOr(extra, one.AdditionalProperties.Schema)
	}
	return props, closed, extra
}

// alternatives are the schemas of s's allOf, oneOf and anyOf.
func alternatives(s *openapi3.Schema) []*openapi3.SchemaRef {
	var out []*openapi3.SchemaRef
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, r := range refs {
			if r != nil && r.Value != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

func values(refs []*openapi3.SchemaRef) []*openapi3.Schema {
	out := make([]*openapi3.Schema, len(refs))
	for i, r := range refs {
		out[i] = r.Value
	}
	return out
}

func cmpOr(a, b *openapi3.SchemaRef) *openapi3.SchemaRef {
	if a != nil {
		return a
	}
	return b
}

// schemaErrors reports what the API's request validator would refuse of
// the JSON js against schema, except the unknown fields unknownFields
// reported.
func (l *linter) schemaErrors(js []byte, schema *openapi3.Schema) {
	var v any
	if err := sigsyaml.Unmarshal(js, &v); err != nil {
		l.add(nil, err.Error())
		return
	}
	err := schema.VisitJSON(v, openapi3.MultiErrors(), openapi3.VisitAsRequest())
	var errs []*openapi3.SchemaError
	collectSchemaErrors(err, &errs)
	for _, e := range errs {
		if strings.Contains(e.Reason, "is unsupported") {
			continue // unknownFields named it, with a suggestion
		}
		reason := e.Reason
		if strings.HasPrefix(reason, "property ") && strings.HasSuffix(reason, " is missing") {
			reason = "is required" // the path names the property
		}
		l.add(e.JSONPointer(), reason)
	}
}

// collectSchemaErrors flattens kin-openapi's errors into out.
func collectSchemaErrors(err error, out *[]*openapi3.SchemaError) {
	var multi openapi3.MultiError
	var se *openapi3.SchemaError
	switch {
	case err == nil:
	case errors.As(err, &multi):
		for _, e := range multi {
			collectSchemaErrors(e, out)
		}
	case errors.As(err, &se):
		*out = append(*out, se)
	default:
		*out = append(*out, &openapi3.SchemaError{Reason: err.Error()})
	}
}

// domainErrors reports what the API's handler would refuse of a document
// the schema accepts: a spec's domain.WorkflowSpec.Validate, a template's
// domain.NewTemplate, a schedule's domain.ScheduleSpec.Validate, a
// trigger's domain.CompileTrigger.
func (l *linter) domainErrors(js []byte, kind lintKind) {
	var errs []domain.FieldError
	prefix := "spec"
	switch kind {
	case kindSchedule:
		var in api.CreateScheduleRequest
		if err := decodeStrict(js, &in); err != nil {
			l.add(nil, err.Error())
			return
		}
		errs = domain.ScheduleSpec{Cron: deref(in.Cron), Interval: deref(in.Interval), Timezone: deref(in.Timezone),
			Jitter: deref(in.Jitter), Overlap: string(deref(in.Overlap)), CatchupWindow: deref(in.CatchupWindow)}.Validate("")
		prefix = ""
	case kindTrigger:
		var in api.CreateTriggerRequest
		if err := decodeStrict(js, &in); err != nil {
			l.add(nil, err.Error())
			return
		}
		_, errs = domain.CompileTrigger(deref(in.Filter), deref(in.Params), "")
		prefix = ""
	case kindTemplate:
		var t api.PushWorkflowRequest
		if err := decodeStrict(js, &t); err != nil {
			l.add(nil, err.Error())
			return
		}
		var spec domain.WorkflowSpec
		var params []domain.Param
		errs = convertField(t.Spec, &spec, "spec")
		if t.Params != nil {
			errs = append(errs, convertField(*t.Params, &params, "params")...)
		}
		if len(errs) == 0 {
			_, errs = domain.NewTemplate(t.Name, deref(t.Description), params, spec)
		}
		prefix = ""
	default:
		var in api.WorkflowSpec
		var spec domain.WorkflowSpec
		if err := decodeStrict(js, &in); err != nil {
			l.add(nil, err.Error())
			return
		}
		if errs = convertField(in, &spec, "spec"); len(errs) == 0 {
			spec.Normalize()
			errs = spec.Validate("spec")
		}
	}
	for _, e := range errs {
		field := e.Field
		if prefix != "" {
			field = strings.TrimPrefix(strings.TrimPrefix(field, prefix), ".")
		}
		l.add(parseFieldPath(field), e.Message)
	}
}

// convertField converts in to out, its domain twin, as the API does; the
// error names field.
func convertField(in, out any, field string) []domain.FieldError {
	if err := api.ConvertJSON(in, out); err != nil {
		return []domain.FieldError{{Field: field, Message: err.Error()}}
	}
	return nil
}

// fieldPath writes path as the API names fields: steps[2].command.
func fieldPath(path []string) string {
	var b strings.Builder
	for _, seg := range path {
		if _, err := strconv.Atoi(seg); err == nil {
			b.WriteString("[" + seg + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

// parseFieldPath splits a field as the API names it (steps[2].command)
// into its path (steps 2 command).
func parseFieldPath(field string) []string {
	var out []string
	for _, part := range strings.Split(field, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			out = append(out, name)
		}
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			out = append(out, idx)
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// mappingKey is the key node of key in the mapping n, nil when absent.
func mappingKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

// mappingValue is the value node of key in the mapping n, nil when absent.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// didYouMean is ` (did you mean "NAME"?)` for the name of known nearest
// to key by edit distance, when near enough to be a typo; "" otherwise.
func didYouMean(key string, known map[string]*openapi3.SchemaRef) string {
	best, bestD := "", -1
	for _, name := range slices.Sorted(maps.Keys(known)) {
		if d := editDistance(key, name); bestD < 0 || d < bestD {
			best, bestD = name, d
		}
	}
	if bestD < 0 || bestD > max(2, len(key)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
