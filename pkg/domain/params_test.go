package domain_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// withParams is spec declaring params.
func withParams(spec domain.WorkflowSpec, params ...domain.Param) domain.WorkflowSpec {
	spec.Params = params
	return spec
}

func TestNormalizeParamType(t *testing.T) {
	t.Parallel()
	w := withParams(dagSpec(shellStep("a")), domain.Param{Name: "x"}, domain.Param{Name: "n", Type: domain.ParamNumber})
	w.Normalize()
	require.Equal(t, domain.ParamString, w.Params[0].Type, "an empty type is a string")
	require.Equal(t, domain.ParamNumber, w.Params[1].Type, "Normalize keeps an explicit type")
}

// Each rule of a param declaration names the offending field.
func TestValidateParams(t *testing.T) {
	t.Parallel()
	p := func(name, typ string, def any) domain.Param { return domain.Param{Name: name, Type: typ, Default: def} }
	env := func(name string, env map[string]string) domain.Step { s := shellStep(name); s.Env = env; return s }
	many := make([]domain.Param, domain.MaxParams+1)
	for i := range many {
		many[i] = p("p"+strconv.Itoa(i), "", nil)
	}
	tests := []struct {
		name   string
		spec   domain.WorkflowSpec
		fields []string
	}{
		{"a name not of [A-Za-z_][A-Za-z0-9_]*", withParams(dagSpec(shellStep("a")), p("1x", "", nil), p("a-b", "", nil)),
			[]string{"spec.params[0].name", "spec.params[1].name"}},
		{"a name of more than 64 characters", withParams(dagSpec(shellStep("a")), p(strings.Repeat("x", 65), "", nil)),
			[]string{"spec.params[0].name"}},
		{"a reserved name", withParams(dagSpec(shellStep("a")), p("CAPSTAN_RUN", "", nil)), []string{"spec.params[0].name"}},
		{"a duplicate name", withParams(dagSpec(shellStep("a")), p("x", "", nil), p("x", domain.ParamNumber, nil)),
			[]string{"spec.params[1].name"}},
		{"an unknown type", withParams(dagSpec(shellStep("a")), p("x", "int", nil)), []string{"spec.params[0].type"}},
		{"a number default that is a string", withParams(dagSpec(shellStep("a")), p("x", domain.ParamNumber, "3")),
			[]string{"spec.params[0].default"}},
		{"a boolean default that is a number", withParams(dagSpec(shellStep("a")), p("x", domain.ParamBoolean, 1.0)),
			[]string{"spec.params[0].default"}},
		{"a string default that is a boolean", withParams(dagSpec(shellStep("a")), p("x", "", true)),
			[]string{"spec.params[0].default"}},
		{"a number default that is not finite", withParams(dagSpec(shellStep("a")), p("x", domain.ParamNumber, math.Inf(1))),
			[]string{"spec.params[0].default"}},
		{"a json default that JSON cannot hold", withParams(dagSpec(shellStep("a")), p("x", domain.ParamJSON, []any{math.NaN()})),
			[]string{"spec.params[0].default"}},
		{"a default longer than an env value may be", withParams(dagSpec(shellStep("a")),
			p("x", "", strings.Repeat("v", domain.MaxEnvValueBytes+1))), []string{"spec.params[0].default"}},
		{"a required param with a default", withParams(dagSpec(shellStep("a")),
			domain.Param{Name: "x", Required: true, Default: "v"}), []string{"spec.params[0].default"}},
		{"a description of more than 1000 characters", withParams(dagSpec(shellStep("a")),
			domain.Param{Name: "x", Description: strings.Repeat("é", domain.MaxParamDescription+1)}),
			[]string{"spec.params[0].description"}},
		{"more than MaxParams params", withParams(dagSpec(shellStep("a")), many...), []string{"spec.params"}},
		{"a step's env sets a param", withParams(dagSpec(shellStep("a"), env("b", map[string]string{"x": "1", "y": "2"})),
			p("x", "", nil)), []string{"spec.steps[1].env.x"}},
		{"a step's secret_env sets a param", withParams(dagSpec(func() domain.Step {
			s := shellStep("a")
			s.SecretEnv = map[string]string{"TOKEN": "t"}
			return s
		}()), p("TOKEN", "", nil)), []string{"spec.steps[0].secret_env.TOKEN"}},
		{"a step's input is named as a param", withParams(dagSpec(func() domain.Step {
			s := shellStep("a")
			s.Outputs = []string{"n"}
			return s
		}(), func() domain.Step {
			s := shellStep("b")
			s.Inputs = []domain.Input{{From: "a.n", As: "N"}}
			return s
		}()), p("N", "", nil)), []string{"spec.steps[1].inputs[0].as"}},
		{"a condition reads an undeclared param", withParams(dagSpec(withIf(shellStep("a"), `params.y == "1"`)),
			p("x", "", nil)), []string{"spec.steps[0].if"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.fields, fields(validate(tc.spec)))
		})
	}
}

// Declarations of every type, with and without defaults, that a spec
// accepts; a condition may read a declared param.
func TestValidateParamsAccepts(t *testing.T) {
	t.Parallel()
	spec := withParams(dagSpec(withIf(shellStep("a"), `params.count > 3 && params["region"] == "eu"`)),
		domain.Param{Name: "region", Default: "eu", Description: "where to deploy"},
		domain.Param{Name: "count", Type: domain.ParamNumber, Default: 3.0},
		domain.Param{Name: "int_default", Type: domain.ParamNumber, Default: 3},
		domain.Param{Name: "dry_run", Type: domain.ParamBoolean, Default: false},
		domain.Param{Name: "config", Type: domain.ParamJSON, Default: map[string]any{"a": []any{1.0, "b"}}},
		domain.Param{Name: "token", Required: true},
		domain.Param{Name: "_private"})
	require.Empty(t, validate(spec))
}

// ResolveParams: a given value must be of its declared type, an unknown name
// is an error, a required param must be given, a param not given takes its
// default or is absent.
func TestResolveParams(t *testing.T) {
	t.Parallel()
	decls := []domain.Param{
		{Name: "region", Type: domain.ParamString, Default: "eu"},
		{Name: "count", Type: domain.ParamNumber},
		{Name: "dry_run", Type: domain.ParamBoolean, Default: true},
		{Name: "config", Type: domain.ParamJSON},
		{Name: "token", Type: domain.ParamString, Required: true},
	}
	tests := []struct {
		name   string
		given  map[string]any
		values map[string]any
		errs   []domain.FieldError
	}{
		{"the given values, defaults for the others, an optional one without default absent",
			map[string]any{"token": "t", "count": 3.0},
			map[string]any{"token": "t", "count": 3.0, "region": "eu", "dry_run": true}, nil},
		{"numbers as json.Number, int and int64 are float64",
			map[string]any{"token": "t", "count": json.Number("2.5")},
			map[string]any{"token": "t", "count": 2.5, "region": "eu", "dry_run": true}, nil},
		{"an int", map[string]any{"token": "t", "count": 7},
			map[string]any{"token": "t", "count": 7.0, "region": "eu", "dry_run": true}, nil},
		{"an int64", map[string]any{"token": "t", "count": int64(-7)},
			map[string]any{"token": "t", "count": -7.0, "region": "eu", "dry_run": true}, nil},
		{"a json param takes any JSON value, held as encoding/json decodes it",
			map[string]any{"token": "t", "config": map[string]any{"n": 1, "l": []string{"a"}}},
			map[string]any{"token": "t", "region": "eu", "dry_run": true,
				"config": map[string]any{"n": 1.0, "l": []any{"a"}}}, nil},
		{"a json param may be null", map[string]any{"token": "t", "config": nil},
			map[string]any{"token": "t", "region": "eu", "dry_run": true, "config": nil}, nil},
		{"a required param not given", nil, nil,
			[]domain.FieldError{{Field: "params.token", Message: "is required"}}},
		{"values of the wrong type, sorted by field", map[string]any{"token": 1.0, "count": "3", "dry_run": "yes"}, nil,
			[]domain.FieldError{
				{Field: "params.count", Message: "must be a number, got string"},
				{Field: "params.dry_run", Message: "must be a boolean, got string"},
				{Field: "params.token", Message: "must be a string, got number"},
			}},
		{"a number that is not finite", map[string]any{"token": "t", "count": math.NaN()}, nil,
			[]domain.FieldError{{Field: "params.count", Message: "must be a finite number"}}},
		{"a malformed json.Number", map[string]any{"token": "t", "count": json.Number("x")}, nil,
			[]domain.FieldError{{Field: "params.count", Message: "must be a number, got string"}}},
		{"an unknown name", map[string]any{"token": "t", "colour": "red"}, nil,
			[]domain.FieldError{{Field: "params.colour",
				Message: "unknown param; the workflow declares region, count, dry_run, config, token"}}},
		{"a value longer than an env value may be", map[string]any{"token": strings.Repeat("t", domain.MaxEnvValueBytes+1)}, nil,
			[]domain.FieldError{{Field: "params.token", Message: "is 32769 bytes as text; at most 32768"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			values, errs := domain.ResolveParams(decls, tc.given, "params")
			require.Equal(t, tc.errs, errs)
			require.Equal(t, tc.values, values)
		})
	}
	values, errs := domain.ResolveParams(nil, nil, "params")
	require.Empty(t, errs)
	require.NotNil(t, values, "no params: an empty map")
	_, errs = domain.ResolveParams(nil, map[string]any{"x": 1}, "")
	require.Equal(t, []domain.FieldError{{Field: "x", Message: "unknown param; the workflow declares none"}}, errs)
}

// ParamEnv: the declared type decides each value's text.
func TestParamEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		typ   string
		value any
		text  string
	}{
		{"a string as is", domain.ParamString, "a b", "a b"},
		{"an integer without .0", domain.ParamNumber, 3.0, "3"},
		{"a fraction", domain.ParamNumber, 2.5, "2.5"},
		{"a large number without exponent", domain.ParamNumber, 1e21, "1000000000000000000000"},
		{"a small number without exponent", domain.ParamNumber, 1e-7, "0.0000001"},
		{"a boolean", domain.ParamBoolean, false, "false"},
		{"a json object, compact, keys sorted", domain.ParamJSON, map[string]any{"b": 1.0, "a": []any{"x", nil}},
			`{"a":["x",null],"b":1}`},
		{"a json string keeps its quotes", domain.ParamJSON, "abc", `"abc"`},
		{"a json value's HTML characters are not escaped", domain.ParamJSON, "<a&b>", `"<a&b>"`},
		{"a json number", domain.ParamJSON, 3.0, "3"},
		{"json null", domain.ParamJSON, nil, "null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := domain.ParamEnv([]domain.Param{{Name: "P", Type: tc.typ}}, map[string]any{"P": tc.value})
			require.Equal(t, map[string]string{"P": tc.text}, env)
		})
	}
	require.Nil(t, domain.ParamEnv([]domain.Param{{Name: "P", Type: domain.ParamString}}, nil), "no value: no variable")
	require.Nil(t, domain.ParamEnv(nil, map[string]any{"P": "x"}), "an undeclared value: no variable")
}

// StepsWithParams gives every task step the params as env, copying the
// maps; the spec is not changed, and waits get nothing.
func TestStepsWithParams(t *testing.T) {
	t.Parallel()
	a := shellStep("a")
	a.Env = map[string]string{"MODE": "fast"}
	spec := withParams(dagSpec(a, shellStep("b"), domain.Step{Name: "w", Kind: domain.KindApproval}),
		domain.Param{Name: "REGION"}, domain.Param{Name: "N", Type: domain.ParamNumber})
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))

	steps := spec.StepsWithParams(map[string]any{"REGION": "eu", "N": 2.0})
	require.Equal(t, map[string]string{"MODE": "fast", "REGION": "eu", "N": "2"}, steps[0].Env)
	require.Equal(t, map[string]string{"REGION": "eu", "N": "2"}, steps[1].Env)
	require.Nil(t, steps[2].Env, "an approval runs no process")
	require.Equal(t, map[string]string{"MODE": "fast"}, spec.Steps[0].Env, "the spec's env is not changed")
	require.Nil(t, spec.Steps[1].Env)

	same := spec.StepsWithParams(nil)
	require.Same(t, &spec.Steps[0], &same[0], "no values: the spec's steps themselves")
}

// Conditions read the run's params; numbers are doubles and compare with
// ints (params.count > 3).
func TestEvaluateConditionsOnParams(t *testing.T) {
	t.Parallel()
	spec := withParams(dagSpec(
		withIf(shellStep("big"), `params.count > 3`),
		withIf(shellStep("prod"), `params.env == "prod" && !params.dry_run`),
		withIf(shellStep("eu"), `params.config.region == "eu" && params.config.zones.size() == 2`),
		withIf(shellStep("given"), `has(params.note)`),
		withIf(shellStep("note"), `params.note == "x"`),
	),
		domain.Param{Name: "count", Type: domain.ParamNumber},
		domain.Param{Name: "env", Default: "dev"},
		domain.Param{Name: "dry_run", Type: domain.ParamBoolean, Default: false},
		domain.Param{Name: "config", Type: domain.ParamJSON},
		domain.Param{Name: "note"})
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	tests := []struct {
		name  string
		given map[string]any
		start []string
		skip  []string
	}{
		{"each condition holds", map[string]any{"count": 4, "env": "prod",
			"config": map[string]any{"region": "eu", "zones": []any{"a", "b"}}, "note": "x"},
			[]string{"big", "prod", "eu", "given", "note"}, nil},
		{"each is false; a param not given fails the condition that reads it", map[string]any{"count": 3,
			"config": map[string]any{"region": "us", "zones": []any{}}},
			nil, []string{"big", "prod", "eu", "given", "note"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			params, errs := domain.ResolveParams(spec.Params, tc.given, "params")
			require.Empty(t, errs)
			p := domain.Evaluate(spec, nil, false, params)
			require.Equal(t, tc.start, p.Start, "Start")
			require.Equal(t, tc.skip, p.Skip, "Skip")
		})
	}
	p := domain.Evaluate(spec, nil, false, map[string]any{"count": 4.0, "env": "prod", "dry_run": false,
		"config": map[string]any{"region": "eu", "zones": []any{"a", "b"}}, "note": "y"})
	require.Equal(t, "its condition is false", p.Reasons["note"])
	require.Contains(t, domain.Evaluate(spec, nil, false, nil).Reasons["big"], "its condition failed",
		"nil params read as none")
}

// FuzzResolveParams: for any JSON object of given values and a fixed set of
// declarations, ResolveParams never panics and is deterministic; accepted
// values are each of their declared type, ParamEnv's text reads back as the
// value, and StepsWithParams leaves the spec unchanged.
func FuzzResolveParams(f *testing.F) {
	f.Add(`{"s":"x","n":3,"b":true,"j":{"a":[1,"2",null]}}`)
	f.Add(`{"n":1e300,"j":"<&>"}`)
	f.Add(`{"n":-0,"r":"y"}`)
	f.Add(`{"x":1}`)
	f.Add(`{"s":null,"n":"3","b":1}`)
	f.Add(`{}`)
	decls := []domain.Param{
		{Name: "s", Type: domain.ParamString, Default: "d"},
		{Name: "n", Type: domain.ParamNumber},
		{Name: "b", Type: domain.ParamBoolean, Default: false},
		{Name: "j", Type: domain.ParamJSON},
		{Name: "r", Type: domain.ParamString, Required: true},
	}
	spec := withParams(dagSpec(shellStep("a")), decls...)
	spec.Normalize()
	require.Empty(f, spec.Validate("spec"))
	f.Fuzz(func(t *testing.T, body string) {
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var given map[string]any
		if dec.Decode(&given) != nil {
			return
		}
		values, errs := domain.ResolveParams(decls, given, "params")
		again, errs2 := domain.ResolveParams(decls, given, "params")
		require.Equal(t, errs, errs2, "deterministic")
		require.Equal(t, values, again, "deterministic")
		if len(errs) > 0 {
			require.Nil(t, values)
			for _, e := range errs {
				require.True(t, strings.HasPrefix(e.Field, "params."), e.Field)
				require.NotEmpty(t, e.Message)
			}
			return
		}
		env := domain.ParamEnv(decls, values)
		for _, p := range decls {
			v, ok := values[p.Name]
			if !ok {
				require.NotContains(t, env, p.Name)
				continue
			}
			text := env[p.Name]
			switch p.Type {
			case domain.ParamString:
				require.Equal(t, v, text)
			case domain.ParamNumber:
				got, err := strconv.ParseFloat(text, 64)
				require.NoError(t, err)
				require.Equal(t, v, got)
				require.NotContains(t, text, "e")
			case domain.ParamBoolean:
				require.Equal(t, strconv.FormatBool(v.(bool)), text)
			case domain.ParamJSON:
				var back any
				require.NoError(t, json.Unmarshal([]byte(text), &back))
				require.Equal(t, v, back)
			}
		}
		steps := spec.StepsWithParams(values)
		require.Equal(t, env, steps[0].Env)
		require.Nil(t, spec.Steps[0].Env, "the spec is not changed")
	})
}
