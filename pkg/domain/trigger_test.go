package domain_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// decode is body decoded as encoding/json decodes a payload.
func decode(t testing.TB, body string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	return v
}

// A trigger's filter must compile and be a boolean, and each param mapping
// must compile under a valid param name; each problem names its field.
func TestCompileTriggerRejects(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range domain.MaxParams + 1 {
		many["p"+strconv.Itoa(i)] = "1"
	}
	tests := []struct {
		name   string
		filter string
		params map[string]string
		fields []string
	}{
		{"a filter that does not parse", "event.key ==", nil, []string{"trigger.filter"}},
		{"a filter that is not a boolean", "event.key.size()", nil, []string{"trigger.filter"}},
		{"a filter over an unknown variable", `steps.a.phase == "FAILED"`, nil, []string{"trigger.filter"}},
		{"a filter reading a field an event does not have", `event.name == "x"`, nil, []string{"trigger.filter"}},
		{"a filter longer than MaxTriggerExprBytes", "true" + strings.Repeat(" ", domain.MaxExprBytes), nil,
			[]string{"trigger.filter"}},
		{"a param that does not compile", "", map[string]string{"amount": "event.payload.amount +"},
			[]string{"trigger.params.amount"}},
		{"an empty param expression", "", map[string]string{"amount": ""}, []string{"trigger.params.amount"}},
		{"an invalid param name", "", map[string]string{"1x": "1", "a-b": "1"},
			[]string{"trigger.params.1x", "trigger.params.a-b"}},
		{"a reserved param name", "", map[string]string{"CAPSTAN_RUN": "1"}, []string{"trigger.params.CAPSTAN_RUN"}},
		{"more than MaxParams params", "", many, []string{"trigger.params"}},
		{"every problem, sorted by field", "1", map[string]string{"z": "(", "a": ")"},
			[]string{"trigger.filter", "trigger.params.a", "trigger.params.z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, errs := domain.CompileTrigger(tc.filter, tc.params, "trigger")
			require.Nil(t, r)
			require.Equal(t, tc.fields, fields(errs), "%v", errs)
		})
	}
}

// Hatchet's event triggers: an event starts a run when the trigger's filter
// over event.key, event.id and event.payload holds (no filter: every
// event), with params computed from the event; JSON numbers (doubles)
// compare with ints.
func TestTriggerApply(t *testing.T) {
	t.Parallel()
	order := `{"amount": 150, "currency": "EUR", "items": [{"sku": "a", "qty": 2}], "note": null}`
	tests := []struct {
		name    string
		filter  string
		params  map[string]string
		payload string
		match   bool
		values  map[string]any
	}{
		{"no filter: every event", "", nil, `{}`, true, map[string]any{}},
		{"a double compares with an int", "event.payload.amount > 100", nil, order, true, map[string]any{}},
		{"and is false below it", "event.payload.amount > 200", nil, order, false, nil},
		{"a double equals an int", "event.payload.amount == 150", nil, order, true, map[string]any{}},
		{"the key", `event.key == "order.created"`, nil, order, true, map[string]any{}},
		{"the id", `event.id.startsWith("ev-")`, nil, order, true, map[string]any{}},
		{"has on the payload", "has(event.payload.coupon)", nil, order, false, nil},
		{"the size of a list", "event.payload.items.size() > 0", nil, order, true, map[string]any{}},
		{"a macro over a list", `event.payload.items.exists(i, i.sku == "a" && i.qty >= 2)`, nil, order, true,
			map[string]any{}},
		{"params of every JSON kind", `event.payload.currency == "EUR"`, map[string]string{
			"amount":   "event.payload.amount",
			"cents":    "int(event.payload.amount) * 100",
			"unsigned": "2u",
			"currency": "event.payload.currency",
			"big":      "event.payload.amount > 100",
			"skus":     "event.payload.items.map(i, i.sku)",
			"first":    "event.payload.items[0]",
			"note":     "event.payload.note",
			"source":   `event.key + "/" + event.id`,
		}, order, true, map[string]any{
			"amount": 150.0, "cents": 15000.0, "unsigned": 2.0, "currency": "EUR", "big": true,
			"skus": []any{"a"}, "first": map[string]any{"sku": "a", "qty": 2.0}, "note": nil,
			"source": "order.created/ev-1",
		}},
		{"a false filter computes no params", "false", map[string]string{"x": "event.payload.missing"}, order, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, errs := domain.CompileTrigger(tc.filter, tc.params, "trigger")
			require.Empty(t, errs)
			match, values, err := r.Apply(domain.TriggerEvent{Key: "order.created", ID: "ev-1", Payload: decode(t, tc.payload)})
			require.NoError(t, err)
			require.Equal(t, tc.match, match)
			require.Equal(t, tc.values, values)
		})
	}
}

// Apply's errors name the expression that failed; the delivery fails and no
// run starts.
func TestTriggerApplyErrors(t *testing.T) {
	t.Parallel()
	long := `{"s": "` + strings.Repeat("a", 2<<20) + `"}`
	tests := []struct {
		name    string
		filter  string
		params  map[string]string
		payload string
		field   string
		message string
	}{
		{"a key the payload does not have", "event.payload.amount > 1", nil, `{}`, "filter", "no such key: amount"},
		{"a dyn filter that is not a boolean", "event.payload.amount", nil, `{"amount": 1}`, "filter",
			"is a double, not a boolean"},
		{"a payload that is not an object", "has(event.payload.x)", nil, `[1]`, "filter", ""},
		{"a param's missing key", "", map[string]string{"a": "event.payload.a"}, `{}`, "params.a", "no such key: a"},
		{"a param that is not finite", "", map[string]string{"inf": "1.0 / 0.0"}, `{}`, "params.inf",
			"+Inf is not a finite number"},
		{"a param of bytes", "", map[string]string{"b": `b"x"`}, `{}`, "params.b", "a bytes has no JSON form"},
		{"a param of a timestamp", "", map[string]string{"t": `timestamp("2024-01-01T00:00:00Z")`}, `{}`, "params.t",
			"has no JSON form"},
		{"a param map with an int key", "", map[string]string{"m": `{1: "a"}`}, `{}`, "params.m",
			"a map with a int key has no JSON form"},
		{"an evaluation past MaxExprCost", `event.payload.s.contains("zzz")`, nil, long, "filter", "expression limit exceeded: it cost more than 100000 units"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, errs := domain.CompileTrigger(tc.filter, tc.params, "trigger")
			require.Empty(t, errs)
			match, values, err := r.Apply(domain.TriggerEvent{Key: "k", ID: "1", Payload: decode(t, tc.payload)})
			require.False(t, match)
			require.Nil(t, values)
			var fe domain.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tc.field, fe.Field)
			require.Contains(t, fe.Message, tc.message)
		})
	}
}

// A compiled rule is safe to share: one rule applied from many goroutines
// (the race detector checks) gives each event its own answer.
func TestTriggerApplyConcurrent(t *testing.T) {
	t.Parallel()
	r, errs := domain.CompileTrigger("event.payload.n % 2 == 0", map[string]string{"n": "event.payload.n"}, "trigger")
	require.Empty(t, errs)
	done := make(chan error)
	for i := range 8 {
		go func() {
			match, values, err := r.Apply(domain.TriggerEvent{Payload: map[string]any{"n": i}})
			if err == nil && (match != (i%2 == 0) || match && values["n"] != float64(i)) {
				err = errors.New("wrong answer for " + strconv.Itoa(i))
			}
			done <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-done)
	}
}

// FuzzTriggerApply: for any JSON payload and key, a fixed set of rules never
// panics and is deterministic; an error means no match and no params; a
// match gives every mapped param, as a value encoding/json encodes.
func FuzzTriggerApply(f *testing.F) {
	f.Add("order.created", `{"amount": 150, "items": [{"sku": "a"}], "customer": {"tier": "gold"}}`)
	f.Add("order.created", `{"amount": "150", "items": "x"}`)
	f.Add("", `null`)
	f.Add("k", `[1, 2, 3]`)
	f.Add("k", `{"amount": 1e308, "items": [], "customer": null}`)
	f.Add("k", `{"amount": -0, "items": [[[]]], "customer": {"tier": 1}}`)
	type rule struct {
		filter string
		params map[string]string
	}
	rules := []rule{
		{"", nil},
		{"event.payload.amount > 100", map[string]string{"amount": "event.payload.amount"}},
		{`event.key == "order.created" && has(event.payload.items)`, map[string]string{"n": "event.payload.items.size()"}},
		{`event.payload.items.exists(i, i.sku == "a")`, map[string]string{"first": "event.payload.items[0]"}},
		{`has(event.payload.customer) && event.payload.customer.tier == "gold"`,
			map[string]string{"customer": "event.payload.customer", "all": "event.payload"}},
		{"event.payload.amount * 2.0 > 10.0", map[string]string{"double": "event.payload.amount * 2.0"}},
		{"event.payload", map[string]string{"id": "event.id"}},
	}
	compiled := make([]*domain.TriggerRule, len(rules))
	for i, r := range rules {
		var errs []domain.FieldError
		compiled[i], errs = domain.CompileTrigger(r.filter, r.params, "trigger")
		require.Empty(f, errs, "rule %d", i)
	}
	f.Fuzz(func(t *testing.T, key, body string) {
		var payload any
		if json.Unmarshal([]byte(body), &payload) != nil {
			return
		}
		ev := domain.TriggerEvent{Key: key, ID: "ev", Payload: payload}
		for i, r := range compiled {
			match, values, err := r.Apply(ev)
			match2, values2, err2 := r.Apply(ev)
			require.Equal(t, match, match2, "rule %d is deterministic", i)
			require.Equal(t, values, values2, "rule %d is deterministic", i)
			require.Equal(t, err, err2, "rule %d is deterministic", i)
			if err != nil || !match {
				require.False(t, match)
				require.Nil(t, values)
				continue
			}
			require.Len(t, values, len(rules[i].params))
			for name := range rules[i].params {
				require.Contains(t, values, name)
			}
			_, jerr := json.Marshal(values)
			require.NoError(t, jerr, "rule %d: params are JSON", i)
		}
	})
}
