package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// Template is one version of a workflow template (Argo's WorkflowTemplate,
// Conductor's name and version): a spec, whose Params are the template's,
// run by name.
type Template struct {
	Name        string
	Version     int
	Description string
	Spec        WorkflowSpec
}

// MaxDescriptionBytes bounds a template's description.
const MaxDescriptionBytes = 1000

// NewTemplate is the template a push of name, description, params and spec
// registers: params become the spec's Params (a push declares them on the
// template or in the spec, not in both), and the spec is normalized and
// validated. The field errors name the push's fields (name, description,
// params, spec…); with any, nothing may be stored.
func NewTemplate(name, description string, params []Param, spec WorkflowSpec) (Template, []FieldError) {
	var errs []FieldError
	if !ValidName(name) {
		errs = append(errs, FieldError{Field: "name",
			Message: "must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit"})
	}
	if len(description) > MaxDescriptionBytes {
		errs = append(errs, FieldError{Field: "description",
			Message: fmt.Sprintf("must be at most %d bytes, is %d", MaxDescriptionBytes, len(description))})
	}
	switch {
	case len(params) > 0 && len(spec.Params) > 0:
		errs = append(errs, FieldError{Field: "spec.params",
			Message: "declare the template's params once: in params or in spec.params"})
	case len(params) > 0:
		spec.Params = params
	}
	spec.Normalize()
	for _, e := range spec.Validate("spec") {
		if len(params) > 0 && strings.HasPrefix(e.Field, "spec.params") {
			e.Field = strings.TrimPrefix(e.Field, "spec.") // declared at the top level
		}
		errs = append(errs, e)
	}
	return Template{Name: name, Description: description, Spec: spec}, errs
}

// Digest identifies the template's body (description and spec, params
// included): hex SHA-256 of their JSON. Two pushes of the same body have
// the same digest; a changed body, a different one.
func (t Template) Digest() string {
	body, _ := json.Marshal(struct {
		Description string       `json:"description"`
		Spec        WorkflowSpec `json:"spec"`
	}{t.Description, t.Spec}) // plain data: it always encodes
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}
