package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
)

// MaxTriggerNameLen bounds a trigger's name, in characters, so that the
// names of its runs (TriggeredRunName) are valid run names.
const MaxTriggerNameLen = 50

// TriggeredRunName is the name of the run a trigger starts for the event
// id: "<trigger>-<the first 12 hex digits of the SHA-256 of id>". One event
// id so names one run per trigger, which a publication of the id again
// cannot start twice; a trigger name valid and at most MaxTriggerNameLen
// long gives a valid run name.
func TriggeredRunName(trigger, eventID string) string {
	sum := sha256.Sum256([]byte(eventID))
	return trigger + "-" + hex.EncodeToString(sum[:6])
}

// TriggerTarget is a trigger of an event's key as a publication reads it:
// its name, its filter and param mappings (as CompileTrigger takes them),
// and the spec of its workflow version (its params, and the admission
// keys a run of it takes). Missing, when not "", says why the trigger has
// no workflow version to run (e.g. "workflow template etl does not
// exist"); Spec is then unused.
type TriggerTarget struct {
	Name    string
	Filter  string
	Params  map[string]string
	Spec    WorkflowSpec
	Missing string
}

// EventDelivery is what a publication does through one trigger: start the
// run named Run with Params (as ResolveParams returns them), or nothing:
// Error then says why the trigger failed on the event; neither is set when
// its filter did not hold. Keys are the run's admission keys.
type EventDelivery struct {
	Trigger string
	Run     string
	Params  map[string]any
	Keys    AdmissionKeys
	Error   string
}

// DeliverEvent decides what ev does through each of targets, in order
// (Hatchet's event triggers), one EventDelivery each:
//   - a target with Missing fails with that message;
//   - its filter and mappings are compiled (CompileTrigger) and applied to
//     ev (TriggerRule.Apply): an error fails it with the error, naming the
//     expression ("filter: no such key: amount");
//   - a filter that does not hold starts nothing;
//   - the mapped params are resolved against the spec's (ResolveParams),
//     and its admission keys evaluated over them (AdmissionKeys): any
//     error fails it, the errors joined by "; " ("params.amount: ...");
//   - else it starts the run TriggeredRunName(name, ev.ID).
//
// A failed delivery starts nothing; the others are unaffected by it.
func DeliverEvent(ev TriggerEvent, targets []TriggerTarget) []EventDelivery {
	out := make([]EventDelivery, len(targets))
	for i, t := range targets {
		out[i] = deliver(ev, t)
	}
	return out
}

// deliver is DeliverEvent for one target.
func deliver(ev TriggerEvent, t TriggerTarget) EventDelivery {
	d := EventDelivery{Trigger: t.Name}
	if t.Missing != "" {
		d.Error = t.Missing
		return d
	}
	rule, errs := CompileTrigger(t.Filter, t.Params, "")
	if len(errs) > 0 {
		d.Error = joinFieldErrors(errs)
		return d
	}
	match, given, err := rule.Apply(ev)
	switch {
	case err != nil:
		d.Error = err.Error()
		return d
	case !match:
		return d
	}
	params, errs := ResolveParams(t.Spec.Params, given, "params")
	if len(errs) == 0 {
		d.Keys, errs = t.Spec.AdmissionKeys(params, "workflow")
	}
	if len(errs) > 0 {
		d.Error = joinFieldErrors(errs)
		return d
	}
	d.Run, d.Params = TriggeredRunName(t.Name, ev.ID), params
	return d
}

// TriggerParamsProblems checks a trigger's param mappings (name → CEL
// expression) against the params of the workflow version it runs: every
// mapped name must be declared, and every required param mapped. Errors,
// sorted by field, name `<prefix>.<name>`. Whether each value fits its
// param's type is known only from an event: ResolveParams checks it at
// each delivery.
func TriggerParamsProblems(decls []Param, mapped map[string]string, prefix string) []FieldError {
	var errs []FieldError
	for _, name := range slices.Sorted(maps.Keys(mapped)) {
		if !slices.ContainsFunc(decls, func(p Param) bool { return p.Name == name }) {
			errs = append(errs, FieldError{prefix + "." + name, "unknown param; the workflow declares " + declaredNames(decls)})
		}
	}
	for _, p := range decls {
		if _, ok := mapped[p.Name]; p.Required && !ok {
			errs = append(errs, FieldError{prefix + "." + p.Name, "is required by the workflow; map it from the event"})
		}
	}
	slices.SortStableFunc(errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return errs
}

// joinFieldErrors renders errs as "field: message; field: message".
func joinFieldErrors(errs []FieldError) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
