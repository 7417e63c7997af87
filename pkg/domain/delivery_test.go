package domain_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// A triggered run's name is the trigger's, then 12 hex digits of the
// event id's SHA-256: one name per trigger and event id, valid for a
// trigger name of MaxTriggerNameLen.
func TestTriggeredRunName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "big-orders-e8bd59a71e7e", domain.TriggeredRunName("big-orders", "ev-1"))
	require.Equal(t, domain.TriggeredRunName("a", "ev-1"), domain.TriggeredRunName("a", "ev-1"))
	require.NotEqual(t, domain.TriggeredRunName("a", "ev-1"), domain.TriggeredRunName("a", "ev-2"))
	long := "t" + strings.Repeat("0", domain.MaxTriggerNameLen-1)
	require.Len(t, long, domain.MaxTriggerNameLen)
	name := domain.TriggeredRunName(long, "an id")
	require.Len(t, name, 63)
	require.True(t, domain.ValidName(name), name)
}

// DeliverEvent decides each trigger's delivery alone: a missing workflow,
// a CEL error or params that do not fit fail it with the reason; a filter
// that does not hold starts nothing; else the run of TriggeredRunName with
// the resolved params.
func TestDeliverEvent(t *testing.T) {
	t.Parallel()
	decls := []domain.Param{{Name: "amount", Type: domain.ParamNumber, Required: true},
		{Name: "tier", Type: domain.ParamString, Default: "basic"}}
	ev := domain.TriggerEvent{Key: "order.created", ID: "ev-1",
		Payload: map[string]any{"amount": float64(150), "tier": "gold", "note": "x"}}
	tests := []struct {
		name   string
		target domain.TriggerTarget
		want   domain.EventDelivery
	}{
		{"every event of the key, params resolved with their defaults",
			domain.TriggerTarget{Name: "all", Params: map[string]string{"amount": "event.payload.amount"}, Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "all", Run: domain.TriggeredRunName("all", "ev-1"),
				Params: map[string]any{"amount": float64(150), "tier": "basic"}}},
		{"a filter that holds, params mapped into their types",
			domain.TriggerTarget{Name: "big", Filter: "event.payload.amount > 100",
				Params: map[string]string{"amount": "event.payload.amount * 2.0", "tier": "event.payload.tier"}, Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "big", Run: domain.TriggeredRunName("big", "ev-1"),
				Params: map[string]any{"amount": float64(300), "tier": "gold"}}},
		{"a filter that does not hold starts nothing",
			domain.TriggerTarget{Name: "huge", Filter: "event.payload.amount > 1000", Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "huge"}},
		{"a filter that fails on the event",
			domain.TriggerTarget{Name: "f", Filter: "event.payload.missing > 1", Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "f", Error: "filter: no such key: missing"}},
		{"a mapping that fails on the event",
			domain.TriggerTarget{Name: "m", Params: map[string]string{"amount": "event.payload.nope"}, Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "m", Error: "params.amount: no such key: nope"}},
		{"mapped values that do not fit the params",
			domain.TriggerTarget{Name: "p", Params: map[string]string{"amount": "event.payload.note", "x": "1"},
				Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "p", Error: "params.amount: must be a number, got string; " +
				"params.x: unknown param; the workflow declares amount, tier"}},
		{"a missing workflow",
			domain.TriggerTarget{Name: "gone", Missing: "workflow template etl does not exist"},
			domain.EventDelivery{Trigger: "gone", Error: "workflow template etl does not exist"}},
		{"a stored filter that no longer compiles",
			domain.TriggerTarget{Name: "bad", Filter: "event.key ==", Spec: domain.WorkflowSpec{Params: decls}},
			domain.EventDelivery{Trigger: "bad", Error: "filter: does not compile"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := domain.DeliverEvent(ev, []domain.TriggerTarget{tc.target})
			require.Len(t, got, 1)
			if tc.want.Error != "" {
				require.Contains(t, got[0].Error, tc.want.Error)
				require.Empty(t, got[0].Run)
				require.Nil(t, got[0].Params)
				return
			}
			require.Equal(t, tc.want, got[0])
		})
	}
}

// A required param a trigger does not map, and a mapped name the workflow
// does not declare, are problems at the trigger's creation.
func TestTriggerParamsProblems(t *testing.T) {
	t.Parallel()
	decls := []domain.Param{{Name: "amount", Type: domain.ParamNumber, Required: true},
		{Name: "tier", Default: "basic"}}
	require.Empty(t, domain.TriggerParamsProblems(decls, map[string]string{"amount": "1"}, "params"))
	errs := domain.TriggerParamsProblems(decls, map[string]string{"tier": "1", "zz": "2"}, "params")
	require.Equal(t, []string{"params.amount", "params.zz"}, fields(errs))
	require.Equal(t, []string{"params.x"}, fields(domain.TriggerParamsProblems(nil, map[string]string{"x": "1"}, "params")))
}

// FuzzDeliverEvent: for any JSON payload and event id, each delivery is
// deterministic, names its trigger, and either starts a run (a valid name,
// params of the declared types) or fails, never both.
func FuzzDeliverEvent(f *testing.F) {
	f.Add("ev-1", `{"amount": 150, "tier": "gold"}`)
	f.Add("", `{"amount": "150"}`)
	f.Add("x", `null`)
	f.Add("\u00ff", `{"amount": 1e308, "tier": 3}`)
	decls := []domain.Param{{Name: "amount", Type: domain.ParamNumber, Required: true},
		{Name: "tier", Type: domain.ParamString, Default: "basic"}}
	targets := []domain.TriggerTarget{
		{Name: "all", Params: map[string]string{"amount": "event.payload.amount"}, Spec: domain.WorkflowSpec{Params: decls}},
		{Name: "big", Filter: "event.payload.amount > 100", Spec: domain.WorkflowSpec{Params: decls},
			Params: map[string]string{"amount": "event.payload.amount", "tier": "event.payload.tier"}},
		{Name: "gone", Missing: "workflow template etl does not exist"},
	}
	f.Fuzz(func(t *testing.T, id, body string) {
		var payload any
		if json.Unmarshal([]byte(body), &payload) != nil {
			return
		}
		ev := domain.TriggerEvent{Key: "k", ID: id, Payload: payload}
		got := domain.DeliverEvent(ev, targets)
		require.Equal(t, got, domain.DeliverEvent(ev, targets), "deterministic")
		require.Len(t, got, len(targets))
		for i, d := range got {
			require.Equal(t, targets[i].Name, d.Trigger)
			if d.Run == "" {
				require.Nil(t, d.Params)
				continue
			}
			require.Empty(t, d.Error)
			require.True(t, domain.ValidName(d.Run), d.Run)
			_, errs := domain.ResolveParams(decls, d.Params, "params")
			require.Empty(t, errs, "the params resolve as given")
		}
	})
}
