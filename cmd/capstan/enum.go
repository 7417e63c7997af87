package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/spf13/cobra"
)

// enum is a string enum of pkg/api, generated from the spec with its
// Valid method.
type enum interface {
	~string
	Valid() bool
}

// embeddedSpec is pkg/api's copy of openapi/capstan.yaml, parsed once.
var embeddedSpec = sync.OnceValues(api.GetSpec)

// Where the spec declares the enums the CLI's flags take.
var (
	phaseEnum      = enumSource{component: "Phase"}
	roleEnum       = enumSource{component: "Role"}
	overlapEnum    = enumSource{component: "OverlapPolicy"}
	abortStateEnum = enumSource{path: "/v1/aborts", param: "state"}
)

// enumSource is where the embedded spec declares an enum: a schema
// component, or a query parameter of path's GET.
type enumSource struct{ component, path, param string }

// values are the enum's values in the spec's order. The spec is the one
// pkg/api's constants and Valid methods are generated from; a test checks
// that they agree.
func (s enumSource) values() []string {
	spec, err := embeddedSpec()
	if err != nil {
		panic(fmt.Sprintf("the embedded OpenAPI spec: %v", err)) // pkg/api's tests parse it
	}
	var schema *openapi3.SchemaRef
	if s.component != "" {
		schema = spec.Components.Schemas[s.component]
	} else if item := spec.Paths.Find(s.path); item != nil && item.Get != nil {
		if p := item.Get.Parameters.GetByInAndName(openapi3.ParameterInQuery, s.param); p != nil {
			schema = p.Schema
		}
	}
	if schema == nil || schema.Value == nil {
		panic(fmt.Sprintf("the embedded OpenAPI spec declares no enum %+v", s))
	}
	var out []string
	for _, v := range schema.Value.Enum {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// enumValue is a flag whose value must be one of E's: Set refuses any
// other, listing them, so that a typo fails before any request.
type enumValue[E enum] struct {
	target *E
	source enumSource
	kind   string // what a value is, for --help: "phase"
}

func (v *enumValue[E]) String() string { return string(*v.target) }
func (v *enumValue[E]) Type() string   { return v.kind }

func (v *enumValue[E]) Set(s string) error {
	e, err := parseEnum[E](v.source, s)
	if err != nil {
		return err
	}
	*v.target = e
	return nil
}

// parseEnum returns s as an E, or an error listing the values E allows.
func parseEnum[E enum](source enumSource, s string) (E, error) {
	if e := E(s); e.Valid() {
		return e, nil
	}
	return "", fmt.Errorf("%q is not one of %s", s, strings.Join(source.values(), ", "))
}

// enumFlag adds the flag name, of E's values (def when not given, "" for
// none), to cmd, completed by those values.
func enumFlag[E enum](cmd *cobra.Command, p *E, source enumSource, kind, name string, def E, usage string) {
	*p = def
	cmd.Flags().Var(&enumValue[E]{target: p, source: source, kind: kind}, name,
		fmt.Sprintf("%s: %s", usage, strings.Join(source.values(), ", ")))
	_ = cmd.RegisterFlagCompletionFunc(name, enumCompletion(source)) // name was just added
}

// enumCompletion completes a value of source's enum.
func enumCompletion(source enumSource) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
		return slices.DeleteFunc(source.values(), func(v string) bool { return !strings.HasPrefix(v, prefix) }),
			cobra.ShellCompDirectiveNoFileComp
	}
}
