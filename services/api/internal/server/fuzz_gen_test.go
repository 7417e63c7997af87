package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/getkin/kin-openapi/openapi3"
)

// fuzzReq is one request as sent, kept to print when it fails.
type fuzzReq struct {
	i        int
	op, mut  string // operationId; mutation, e.g. "body-field/null"
	detail   string // what the mutation did, e.g. "at body.spec.mode"
	method   string
	target   string // escaped path and query, sent as is
	ctype    string // "" sends no Content-Type
	idemKey  string
	body     []byte
	hasBody  bool
	chunked  bool
	wantBody bool // the response must carry a body (not HEAD)
}

func (q fuzzReq) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "request #%d (%s, %s %s)\n%s %s\n", q.i, q.op, q.mut, q.detail, q.method, q.target)
	if q.ctype != "" {
		fmt.Fprintf(&b, "Content-Type: %s\n", q.ctype)
	}
	if q.idemKey != "" {
		fmt.Fprintf(&b, "Idempotency-Key: %q\n", q.idemKey)
	}
	if q.chunked {
		b.WriteString("Transfer-Encoding: chunked\n")
	}
	body := q.body
	if len(body) > 2048 {
		body = body[:2048]
	}
	fmt.Fprintf(&b, "body (%d bytes): %q", len(q.body), body)
	if len(q.body) > len(body) {
		b.WriteString("…")
	}
	return b.String()
}

// A mutation turns a valid request into a malformed or boundary one; ok is
// false when it does not apply to the operation.
type mutation struct {
	name   string
	weight int
	apply  func(g *gen, q *fuzzReq) (ok bool)
}

var mutations = []mutation{
	{"valid", 25, func(*gen, *fuzzReq) bool { return true }},
	{"schema-random", 5, (*gen).schemaRandom},
	{"body-field", 30, (*gen).mutateField},
	{"body-raw", 8, (*gen).rawBody},
	{"content-type", 4, (*gen).contentType},
	{"path-param", 12, (*gen).pathParam},
	{"query", 6, (*gen).badQuery},
	{"header", 2, (*gen).header},
	{"stray-body", 2, (*gen).strayBody},
	{"method", 4, (*gen).wrongMethod},
	{"unrouted", 4, (*gen).unrouted},
}

// gen builds request i: a valid request to a random operation, then one
// mutation.
type gen struct {
	r      *rand.Rand
	op     fuzzOp
	world  *fuzzWorld
	vals   map[string]string // path parameter values, sent as they are
	query  url.Values
	value  any // the body, decoded; marshalled by finish
	raw    map[string][]byte
	kind   string // a mutation's variant, e.g. "null" for body-field
	detail string // what it did
}

func (fz *fuzzer) generate(i int, r *rand.Rand) fuzzReq {
	g := &gen{r: r, op: fz.ops[r.IntN(len(fz.ops))], world: fz.world, vals: map[string]string{},
		query: url.Values{}, raw: map[string][]byte{}}
	q := g.valid(i)
	total := 0
	for _, m := range mutations {
		total += m.weight
	}
	for {
		n := r.IntN(total)
		for _, m := range mutations {
			if n -= m.weight; n < 0 {
				if m.apply(g, &q) {
					q.mut, q.detail = m.name, g.detail
					if g.kind != "" {
						q.mut += "/" + g.kind
					}
					g.finish(&q)
					return q
				}
				break
			}
		}
	}
}

// valid fills q (and g) with a valid request to g.op.
func (g *gen) valid(i int) fuzzReq {
	q := fuzzReq{i: i, op: g.op.id, method: g.op.method, wantBody: true}
	k, steps, haveRun := g.world.run(g.r)
	if !haveRun || g.r.IntN(8) == 0 {
		k = domain.RunKey{Project: "demo", Domain: "dev", Run: g.name()}
	}
	for _, p := range g.op.params {
		switch p.In {
		case openapi3.ParameterInPath:
			g.vals[p.Name] = g.pathValue(p, k, steps)
		case openapi3.ParameterInQuery:
			if v, ok := g.queryValue(p); ok {
				g.query.Set(p.Name, v)
			}
		case openapi3.ParameterInHeader:
			if p.Name == "Idempotency-Key" && g.r.IntN(3) == 0 {
				q.idemKey = g.world.idemKey(g.r)
			}
		}
	}
	if g.op.body != nil && (g.op.bodyRequired || g.r.IntN(3) > 0) {
		q.hasBody, q.ctype = true, "application/json"
		g.value = g.validBody(i)
	}
	return q
}

func (g *gen) pathValue(p *openapi3.Parameter, k domain.RunKey, steps []string) string {
	s := p.Schema.Value
	switch {
	case p.Name == "project":
		return k.Project
	case p.Name == "domain":
		return k.Domain
	case p.Name == "run":
		return k.Run
	case p.Name == "action":
		if st, ok := pick(g.r, steps); ok && g.r.IntN(2) == 0 {
			return st
		}
		return domain.RootActionName
	case s.Format == "uuid":
		if w, ok := g.world.worker(g.r); ok && g.r.IntN(6) > 0 {
			return w
		}
		return g.uuid()
	case p.Name == "id":
		if a, ok := g.world.attempt(g.r); ok && g.r.IntN(6) > 0 {
			return strconv.FormatInt(a, 10)
		}
	case p.Name == "task" && g.r.IntN(4) > 0:
		return "0"
	case p.Name == "attempt" && g.r.IntN(4) > 0:
		return "1"
	}
	// Escaped as a client escapes it: a free-text value (an event's id)
	// may hold a space or a slash.
	return url.PathEscape(fmt.Sprint(g.genValue(s, 0)))
}

func (g *gen) queryValue(p *openapi3.Parameter) (string, bool) {
	if g.r.IntN(2) == 0 {
		return "", false
	}
	if p.Name == "cursor" {
		return g.world.cursor(g.r)
	}
	if p.Name == "follow" { // a followed stream lasts as long as its attempt: logs_test.go covers it
		return "false", true
	}
	return fmt.Sprint(g.genValue(p.Schema.Value, 0)), true
}

// validBody is a body the handler accepts, where the spec alone cannot say
// what that is (names that exist, specs that pass validation).
func (g *gen) validBody(i int) any {
	switch g.op.id {
	case "CreateRun":
		body := map[string]any{"spec": g.validSpec()}
		switch g.r.IntN(5) {
		case 0, 1:
			body["name"] = fmt.Sprintf("f%d-%s", i, g.name())
		case 2:
			if k, _, ok := g.world.run(g.r); ok {
				body["name"] = k.Run // taken: 409, unless another project
			}
		}
		return body
	case "AbortRun", "AbortAction":
		return map[string]any{"reason": "fuzz " + g.oddString()}
	case "RegisterWorker":
		return map[string]any{"name": "w" + g.name(), "address": fmt.Sprintf("http://127.0.0.1:%d", 9000+g.r.IntN(999)),
			"slots": 1 + g.r.IntN(8), "labels": map[string]any{"zone": "a"},
			"resources": map[string]any{"cpu_millis": g.r.IntN(8000), "memory_bytes": g.r.Int64N(1 << 34)}}
	case "Heartbeat":
		var held []any
		for _, id := range g.world.heldAttempts(g.r) {
			held = append(held, map[string]any{"id": id, "state": "RUNNING"})
		}
		return map[string]any{"draining": g.r.IntN(10) == 0, "attempts": held}
	case "ReportAttempt":
		state, _ := pick(g.r, []string{"BUILDING", "RUNNING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"})
		body := map[string]any{"state": state}
		if state != "BUILDING" && state != "RUNNING" {
			body["exit_code"], body["stdout"], body["cause"] = g.r.IntN(2), "out "+g.oddString(), "user"
		}
		return body
	}
	return g.genValue(g.op.body, 0)
}

func (g *gen) validSpec() map[string]any {
	mode, _ := pick(g.r, []string{"StepByStep", "DAG"})
	n := 1 + g.r.IntN(3)
	steps := make([]any, n)
	for i := range steps {
		st := map[string]any{"name": fmt.Sprintf("s%d", i), "command": "echo " + g.oddString()}
		if g.r.IntN(2) == 0 {
			st["replicas"] = 1 + g.r.IntN(3)
		}
		if mode == "DAG" && i > 0 {
			st["depends_on"] = []any{fmt.Sprintf("s%d", g.r.IntN(i))}
		}
		g.optionalStepFields(st)
		steps[i] = st
	}
	return map[string]any{"mode": mode, "steps": steps}
}

func (g *gen) optionalStepFields(st map[string]any) {
	extra := map[string]any{
		"env":                    map[string]any{"GREETING": g.oddString()},
		"max_retries_failure":    g.r.IntN(3),
		"max_retries_preemption": g.r.IntN(200),
		"max_task_failures":      g.r.IntN(2),
		"timeout":                "10m",
		"scheduling_timeout":     "5m",
		"priority":               []string{"production", "interactive", "batch"}[g.r.IntN(3)],
		"resources":              map[string]any{"cpu_millis": g.r.IntN(4000), "memory_bytes": g.r.IntN(1 << 30)},
		"constraints":            []any{map[string]any{"key": "zone", "op": "EQ", "value": "a"}},
		"coscheduled":            g.r.IntN(2) == 0,
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if g.r.IntN(4) == 0 {
			st[k] = extra[k]
		}
	}
}

// genValue generates a value the schema accepts, from the schema alone.
func (g *gen) genValue(s *openapi3.Schema, depth int) any {
	if len(s.Enum) > 0 {
		v, _ := pick(g.r, s.Enum)
		return v
	}
	switch {
	case s.Type.Is("object"):
		return g.genObject(s, depth)
	case s.Type.Is("array"):
		out := []any{}
		for range g.r.IntN(3) {
			if depth < 4 && s.Items != nil {
				out = append(out, g.genValue(s.Items.Value, depth+1))
			}
		}
		return out
	case s.Type.Is("integer"):
		lo, hi := int64(-5), int64(1000)
		if s.Min != nil {
			lo = int64(*s.Min)
		}
		if s.Max != nil {
			hi = int64(*s.Max)
		}
		return lo + g.r.Int64N(hi-lo+1)
	case s.Type.Is("boolean"):
		return g.r.IntN(2) == 0
	case s.Format == "uuid":
		return g.uuid()
	case s.Pattern != "":
		return g.matching(s.Pattern)
	}
	n := g.r.IntN(12)
	if s.MaxLength != nil {
		n = min(n, int(*s.MaxLength))
	}
	return g.letters(n)
}

func (g *gen) genObject(s *openapi3.Schema, depth int) map[string]any {
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		if slices.Contains(s.Required, k) || (depth < 4 && g.r.IntN(2) == 0) {
			out[k] = g.genValue(s.Properties[k].Value, depth+1)
		}
	}
	if add := s.AdditionalProperties.Schema; add != nil && depth < 4 {
		for range g.r.IntN(3) {
			out[g.letters(1+g.r.IntN(8))] = g.genValue(add.Value, depth+1)
		}
	}
	return out
}

var patternCache sync.Map

// matching returns a name-like string that matches pattern, or "a".
func (g *gen) matching(pattern string) string {
	re, ok := patternCache.Load(pattern)
	if !ok {
		re, _ = patternCache.LoadOrStore(pattern, regexp.MustCompile(pattern))
	}
	if s := g.name(); re.(*regexp.Regexp).MatchString(s) {
		return s
	}
	return "a"
}

// name is a valid Name: 2-12 of [a-z0-9-], starting and ending with [a-z0-9].
func (g *gen) name() string {
	const edge, mid = "abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnopqrstuvwxyz0123456789-"
	b := []byte{edge[g.r.IntN(len(edge))]}
	for range g.r.IntN(10) {
		b = append(b, mid[g.r.IntN(len(mid))])
	}
	return string(append(b, edge[g.r.IntN(len(edge))]))
}

func (g *gen) letters(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.r.IntN(len(alphabet))]
	}
	return string(b)
}

func (g *gen) uuid() string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", g.r.Uint32(), g.r.IntN(1<<16), g.r.IntN(1<<12),
		g.r.IntN(1<<12), g.r.Int64N(1<<48))
}

// weirdStrings are valid JSON strings that stress storage and rendering:
// NUL, control characters, bidi overrides, astral and combining runes.
var weirdStrings = []string{
	"", " ", "hi", "\x00", "a\x00b", "\x01\x02\x1f\x7f", "\t\r\n", "\u2028\u2029", "\u202eevil", "\ufeffbom",
	"😀🚀", "e\u0301", "\uFFFD", "名前", "👩‍👩‍👧", `\`, `"`, "${HOME}", "$(id)", "'; DROP TABLE runs; --",
	"%s%n%x", "<script>alert(1)</script>", "\\u0000", strings.Repeat("é", 300),
}

func (g *gen) weirdString() string { s, _ := pick(g.r, weirdStrings); return s }

// oddString is a weird string the API accepts: any but those with NUL.
func (g *gen) oddString() string {
	for {
		if s := g.weirdString(); !strings.ContainsRune(s, 0) {
			return s
		}
	}
}

// rawJSON returns a placeholder that finish replaces with raw bytes, for
// values json.Marshal cannot produce (invalid UTF-8, lone surrogates, deep
// nesting).
func (g *gen) rawJSON(b []byte) string {
	token := fmt.Sprintf("@@raw%d@@", len(g.raw))
	g.raw[token] = b
	return token
}

// finish renders the target and the body.
func (g *gen) finish(q *fuzzReq) {
	path := g.op.path
	for k, v := range g.vals {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	if q.target == "" {
		q.target = path
		if enc := g.query.Encode(); enc != "" {
			q.target += "?" + enc
		}
	}
	if q.hasBody && q.body == nil {
		b, err := json.Marshal(g.value) // a nil value is the body "null"
		if err != nil {
			panic(err)
		}
		for token, raw := range g.raw {
			b = bytes.ReplaceAll(b, []byte(`"`+token+`"`), raw)
		}
		q.body = b
	}
}

// schemaRandom replaces the body with a value generated from the schema
// alone: it passes the spec, mostly not the handler's own checks.
func (g *gen) schemaRandom(*fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	g.value = g.genValue(g.op.body, 0)
	return true
}

// slot is a value in the body with the schema that describes it (nil when
// none does).
type slot struct {
	path   []any // object keys and array indexes from the root
	schema *openapi3.Schema
}

func collectSlots(v any, s *openapi3.Schema, path []any, out *[]slot) {
	*out = append(*out, slot{path: path, schema: s})
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			var sub *openapi3.Schema
			if s != nil && s.Properties[k] != nil {
				sub = s.Properties[k].Value
			} else if s != nil && s.AdditionalProperties.Schema != nil {
				sub = s.AdditionalProperties.Schema.Value
			}
			collectSlots(x[k], sub, append(slices.Clone(path), k), out)
		}
	case []any:
		for i, e := range x {
			var sub *openapi3.Schema
			if s != nil && s.Items != nil {
				sub = s.Items.Value
			}
			collectSlots(e, sub, append(slices.Clone(path), i), out)
		}
	}
}

func (g *gen) get(path []any) any {
	v := g.value
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v
}

func (g *gen) set(path []any, nv any) {
	if len(path) == 0 {
		g.value = nv
		return
	}
	parent := g.get(path[:len(path)-1])
	switch k := path[len(path)-1].(type) {
	case string:
		parent.(map[string]any)[k] = nv
	case int:
		parent.([]any)[k] = nv
	}
}

func pathString(path []any) string {
	var b strings.Builder
	b.WriteString("body")
	for _, p := range path {
		if i, ok := p.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
		} else {
			fmt.Fprintf(&b, ".%s", p)
		}
	}
	return b.String()
}

// fieldMutations change one value of the body, chosen by what its schema
// says it is; each returns false when the slot does not suit it.
var fieldMutations = []struct {
	name  string
	apply func(g *gen, s slot) bool
}{
	{"wrong-type", (*gen).wrongType},
	{"null", func(g *gen, s slot) bool { g.set(s.path, nil); return true }},
	{"missing-required", (*gen).dropRequired},
	{"unknown-field", (*gen).unknownField},
	{"unknown-enum", (*gen).unknownEnum},
	{"huge-string", (*gen).hugeString},
	{"weird-string", (*gen).weirdField},
	{"number", (*gen).number},
	{"deep-nesting", func(g *gen, s slot) bool { g.set(s.path, g.rawJSON(nested(g.depth()))); return true }},
}

// mutateField applies one field mutation to one value of a valid body.
func (g *gen) mutateField(q *fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	if !q.hasBody {
		q.hasBody, q.ctype, g.value = true, "application/json", g.validBody(q.i)
	}
	var slots []slot
	collectSlots(g.value, g.op.body, nil, &slots)
	m := fieldMutations[g.r.IntN(len(fieldMutations))]
	for _, at := range g.r.Perm(len(slots)) {
		if m.apply(g, slots[at]) {
			g.kind, g.detail = m.name, "at "+pathString(slots[at].path)
			return true
		}
	}
	return false
}

func (g *gen) wrongType(s slot) bool {
	others := []any{"x", json.Number("1.5"), json.Number("7"), true, []any{}, map[string]any{}, nil}
	for {
		v, _ := pick(g.r, others)
		if s.schema == nil || !schemaTakes(s.schema, v) {
			g.set(s.path, v)
			return true
		}
	}
}

// schemaTakes reports whether v is of the schema's JSON type.
func schemaTakes(s *openapi3.Schema, v any) bool {
	switch x := v.(type) {
	case string:
		return s.Type.Is("string")
	case json.Number:
		_, err := x.Int64()
		return s.Type.Is("number") || s.Type.Is("integer") && err == nil
	case bool:
		return s.Type.Is("boolean")
	case []any:
		return s.Type.Is("array")
	case map[string]any:
		return s.Type.Is("object")
	}
	return s.Nullable
}

func (g *gen) dropRequired(s slot) bool {
	obj, ok := g.get(s.path).(map[string]any)
	if !ok || s.schema == nil {
		return false
	}
	for _, k := range s.schema.Required {
		if _, present := obj[k]; present {
			delete(obj, k)
			return true
		}
	}
	return false
}

func (g *gen) unknownField(s slot) bool {
	obj, ok := g.get(s.path).(map[string]any)
	if !ok {
		return false
	}
	key, _ := pick(g.r, []string{"retries", "Name", "STEPS", "__proto__", "", "spec ", "\x00", "é", "constructor"})
	obj[key] = g.weirdString()
	return true
}

func (g *gen) unknownEnum(s slot) bool {
	if s.schema == nil || len(s.schema.Enum) == 0 {
		return false
	}
	v, _ := pick(g.r, s.schema.Enum)
	str := fmt.Sprint(v)
	bad, _ := pick(g.r, []string{"NOT_A_VALUE", strings.ToLower(str), str + " ", " " + str, "", str + "\x00"})
	g.set(s.path, bad)
	return true
}

func (g *gen) hugeString(s slot) bool {
	if s.schema == nil || !s.schema.Type.Is("string") {
		return false
	}
	// Past maxLength, else past the command limit or just long; rarely past
	// the body limit. Sizes are kept down because megabytes cost much under
	// -race, and a long string where no limit applies (labels, logs) is
	// stored and sent again by every later list.
	n := 1<<10 + 1
	switch {
	case g.r.IntN(20) == 0:
		n = 2 * fuzzMaxBody
	case s.schema.MaxLength != nil:
		n = int(*s.schema.MaxLength) + 1
	case g.r.IntN(4) == 0:
		n = 64<<10 + 1 // MaxCommandBytes + 1
	}
	huge := make([]byte, n+2) // raw, not marshalled: cheaper under -race
	huge[0], huge[n+1] = '"', '"'
	copy(huge[1:], bytes.Repeat([]byte("x"), n))
	g.set(s.path, g.rawJSON(huge))
	return true
}

func (g *gen) weirdField(s slot) bool {
	if obj, ok := g.get(s.path).(map[string]any); ok && s.schema != nil && s.schema.AdditionalProperties.Schema != nil {
		obj[g.weirdString()+"K"] = g.weirdString() // a map key: env names, labels
		return true
	}
	if s.schema == nil || !s.schema.Type.Is("string") {
		return false
	}
	switch g.r.IntN(7) {
	case 0:
		g.set(s.path, g.rawJSON([]byte("\"\xff\xfe bad utf-8\"")))
	case 1:
		g.set(s.path, g.rawJSON([]byte(`"lone \ud800 surrogate"`)))
	case 2:
		g.set(s.path, g.rawJSON([]byte("\"raw \x00\x01\n control\""))) // not JSON
	default:
		g.set(s.path, g.weirdString())
	}
	return true
}

// boundaryNumbers are negative, huge, past-int64 and fractional numbers.
var boundaryNumbers = []string{
	"-1", "0", "-0", "1", "2147483647", "2147483648", "-2147483649", "4294967296", "9223372036854775807",
	"9223372036854775808", "-9223372036854775809", "100000000000000000000", "1e20", "1e308", "-1e308",
	"1.5", "0.1", "1.0", "1e-7", "123456789012345678901234567890",
}

func (g *gen) number(s slot) bool {
	if s.schema == nil || !s.schema.Type.Is("integer") && !s.schema.Type.Is("number") {
		return false
	}
	n, _ := pick(g.r, boundaryNumbers)
	g.set(s.path, json.Number(n))
	return true
}

func (g *gen) depth() int {
	d, _ := pick(g.r, []int{64, 1000, 9999, 10_000, 10_001})
	return d
}

func nested(depth int) []byte {
	return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
}

// rawBody replaces the whole body: empty, not JSON, deeply nested, or too
// large (with and without a Content-Length).
func (g *gen) rawBody(q *fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	q.hasBody, q.ctype = true, "application/json"
	valid, err := json.Marshal(g.validBody(q.i))
	if err != nil {
		panic(err)
	}
	bodies := map[string]func() []byte{
		"empty":    func() []byte { return []byte{} },
		"not-json": func() []byte { s, _ := pick(g.r, notJSON); return []byte(s) },
		"scalar": func() []byte {
			s, _ := pick(g.r, []string{"null", "[]", `"spec"`, "0", "true", "{}"})
			return []byte(s)
		},
		"truncated": func() []byte {
			return valid[:g.r.IntN(len(valid))]
		},
		"trailing": func() []byte { return append(slices.Clone(valid), "x"...) },
		"two-docs": func() []byte { return append(append(slices.Clone(valid), '\n'), valid...) },
		"bom":      func() []byte { return append([]byte("\xef\xbb\xbf"), valid...) },
		"dup-keys": func() []byte { return append([]byte(`{"spec":1,`), valid[1:]...) },
		"deep":     func() []byte { return nested(g.depth()) },
		"deep-obj": func() []byte { return []byte(strings.Repeat(`{"a":`, 10_000) + "1" + strings.Repeat("}", 10_000)) },
		"size":     func() []byte { return padTo(valid, g.bodySize()) },
	}
	name, _ := pick(g.r, slices.Sorted(maps.Keys(bodies)))
	if name == "size" && g.r.IntN(4) > 0 { // megabytes cost much under -race
		name = "empty"
	}
	q.body = bodies[name]()
	q.chunked = g.r.IntN(4) == 0
	g.kind, g.detail = name, fmt.Sprintf("%d bytes", len(q.body))
	return true
}

// strayBody sends a body to an operation that takes none.
func (g *gen) strayBody(q *fuzzReq) bool {
	if g.op.body != nil {
		return false
	}
	q.hasBody, q.ctype, q.chunked = true, "application/json", g.r.IntN(2) == 0
	q.body = []byte(`{"spec":{"steps":[]}}`)
	if g.r.IntN(8) == 0 {
		q.body = padTo(q.body, 2*fuzzMaxBody)
	}
	g.detail = fmt.Sprintf("%d bytes", len(q.body))
	return true
}

var notJSON = []string{"not json", "{", "}", `{"spec":}`, "<xml/>", "spec=1", "{'spec': 1}", "\x00\x01\x02",
	"\xff\xfe\xfd", "NaN", "Infinity", `{"spec":{"steps":[{"name":"a","command":"x"}]}`, "--", `{"a" "b"}`}

// bodySize is a body length at and around the 1 MiB limit.
func (g *gen) bodySize() int {
	n, _ := pick(g.r, []int{fuzzMaxBody - 1, fuzzMaxBody, fuzzMaxBody + 1, 2 * fuzzMaxBody})
	return n
}

// padTo pads a JSON document with trailing whitespace to n bytes.
func padTo(doc []byte, n int) []byte {
	if len(doc) >= n {
		return doc
	}
	return append(slices.Clone(doc), bytes.Repeat([]byte(" "), n-len(doc))...)
}

var contentTypes = []string{"", "text/plain", "application/xml", "application/x-www-form-urlencoded",
	"multipart/form-data; boundary=x", "application/json; charset=utf-16", "application/jsonx", "APPLICATION/JSON",
	"application/problem+json", "application/json;;", "*/*", "application/json; charset=utf-8", "json"}

func (g *gen) contentType(q *fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	if !q.hasBody {
		q.hasBody, g.value = true, g.validBody(q.i)
	}
	q.ctype, _ = pick(g.r, contentTypes)
	g.detail = fmt.Sprintf("%q", q.ctype)
	return true
}

// pathParam replaces one path parameter by a value its schema refuses, or an
// edge one it accepts; values are sent already escaped.
func (g *gen) pathParam(*fuzzReq) bool {
	var params []*openapi3.Parameter
	for _, p := range g.op.params {
		if p.In == openapi3.ParameterInPath {
			params = append(params, p)
		}
	}
	p, ok := pick(g.r, params)
	if !ok {
		return false
	}
	s := p.Schema.Value
	var bad []string
	switch {
	case s.Format == "uuid":
		bad = []string{"not-a-uuid", strings.ToUpper(g.uuid()), "{" + g.uuid() + "}", strings.ReplaceAll(g.uuid(), "-", ""),
			g.uuid() + "0", "00000000-0000-0000-0000-00000000000g", "..", "%00", "00000000-0000-0000-0000-000000000000"}
	case s.Type.Is("integer"):
		bad = []string{"0", "-1", "1.5", "1e3", "abc", "%20", "+1", "0x10", "9223372036854775807", "9223372036854775808",
			"2147483647", "2147483648", "4294967296", "100000000000000000000", "-9223372036854775809", "%00", "1%2F2"}
	default:
		bad = []string{"UPPER", "Demo", strings.Repeat("a", 64), strings.Repeat("a", 63), "..", ".", "%2F", "a%2Fb",
			"%2e%2e", "%00", "a%00", "%0A", "%C3%A9", "%FF", "-a", "a-", "a_b", "%20", "a.b", "a0", "%F0%9F%98%80", "~"}
		if s.MaxLength != nil {
			bad = append(bad, strings.Repeat("b", int(*s.MaxLength)+1))
		}
	}
	v, _ := pick(g.r, bad)
	g.vals[p.Name] = v
	g.kind, g.detail = p.Name, p.Name+"="+v
	return true
}

// badQuery sets one query parameter to a value its schema refuses, or an edge
// value it accepts.
func (g *gen) badQuery(*fuzzReq) bool {
	var params []*openapi3.Parameter
	for _, p := range g.op.params {
		if p.In == openapi3.ParameterInQuery {
			params = append(params, p)
		}
	}
	p, ok := pick(g.r, params)
	if !ok {
		return false
	}
	s := p.Schema.Value
	var vals []string
	switch {
	case s.Type.Is("integer"):
		vals = []string{"0", "-1", "1", "500", "501", "100000000000000000000", "1.5", "abc", "", "9223372036854775808"}
	case len(s.Enum) > 0:
		vals = []string{"NOT_A_PHASE", "queued", "", "RUNNING,FAILED", "\x00"}
	default:
		vals = []string{"!!", "", "\x00", "garbage", strings.Repeat("A", 201), cursorOf("not a time|x"),
			cursorOf("2020-01-01T00:00:00Z|"), cursorOf("2020-01-01T00:00:00Z|\x00"), cursorOf("2020-01-01T00:00:00Z|\xff"),
			cursorOf("9999-12-31T23:59:59Z|zzz"), cursorOf("0001-01-01T00:00:00Z|a"), cursorOf("|")}
	}
	v, _ := pick(g.r, vals)
	if g.r.IntN(5) == 0 {
		g.query.Add(p.Name, v) // repeated
	} else {
		g.query.Set(p.Name, v)
	}
	if g.r.IntN(4) == 0 {
		g.query.Set("unknown", "1")
	}
	g.kind, g.detail = p.Name, fmt.Sprintf("%s=%q", p.Name, v)
	return true
}

func cursorOf(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func (g *gen) header(q *fuzzReq) bool {
	if g.op.id != "CreateRun" {
		return false
	}
	if !q.hasBody {
		q.hasBody, q.ctype, g.value = true, "application/json", g.validBody(q.i)
	}
	q.idemKey, _ = pick(g.r, []string{strings.Repeat("k", 200), strings.Repeat("k", 201), " ", "é😀", "a b"})
	g.detail = fmt.Sprintf("Idempotency-Key of %d bytes", len(q.idemKey))
	return true
}

func (g *gen) wrongMethod(q *fuzzReq) bool {
	var others []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodHead} {
		if !slices.Contains(g.op.methods, m) {
			others = append(others, m)
		}
	}
	m, ok := pick(g.r, others)
	if !ok {
		return false
	}
	q.method, q.wantBody = m, m != http.MethodHead
	return true
}

// unroutedPaths match no operation. The dashboard's files under /ui/ are left
// out: http.FileServer answers a missing one with a text/plain 404, outside
// the API's problem+json contract.
var unroutedPaths = []string{"/v1/projects/demo/domains/dev/runs/", "/v1/projects/demo/domains/dev", "/v1//workers",
	"/v1/workers/../workers", "/v1/projects/demo/domains/dev/runs/x/actions", "/v1/projects/%2e%2e/domains/dev/runs",
	"/v1/attempts/", "/v1/attempts/1/report/extra", "/V1/WORKERS", "/v1/workers/", "/v1", "/v2/workers",
	"/v1/projects/demo/domains/dev/runs/x/actions/a0/tasks/0/attempts/1", "/healthz", "/readyz", "/metrics",
	"/v1/projects/demo/domains/dev/runs/%00", "/v1/%F0%9F%98%80"}

func (g *gen) unrouted(q *fuzzReq) bool {
	q.target, _ = pick(g.r, unroutedPaths)
	g.detail = q.target
	return true
}
