package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
)

// paramArgs parses the --param KEY=VALUE flags into KEY → VALUE (the text
// as given). Usage errors: a flag without "=" or with an empty KEY, a KEY
// given twice.
func paramArgs(flags []string) (map[string]string, error) {
	texts := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, usagef("--param %q: want KEY=VALUE", f)
		}
		if _, twice := texts[k]; twice {
			return nil, usagef("--param %s: given twice", k)
		}
		texts[k] = v
	}
	return texts, nil
}

// typedParams converts each text of texts (paramArgs') to the JSON value of
// the param of that name that decls declares, by its type: a number is
// parsed as a float, a boolean is true or false, a json param is parsed as
// JSON, a string is the text as it is. owner names who declares decls
// ("workflow hello version 2", "spec.yaml"). Nil when texts is empty. Usage
// errors name the param: a value that is not of its type, or a name that
// decls does not declare.
func typedParams(decls []api.Param, texts map[string]string, owner string) (*api.ParamValues, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	values := make(api.ParamValues, len(texts))
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		i := slices.IndexFunc(decls, func(p api.Param) bool { return p.Name == name })
		if i < 0 {
			return nil, usagef("--param %s: %s declares no param %s (it declares %s)", name, owner, name, paramNames(decls))
		}
		typ := paramType(decls[i])
		v, err := paramValue(typ, texts[name])
		if err != nil {
			return nil, usagef("--param %s=%s: %s is a %s param of %s: %v", name, texts[name], name, typ, owner, err)
		}
		values[name] = v
	}
	return &values, nil
}

// paramType is p's declared type, string when it declares none.
func paramType(p api.Param) api.ParamType {
	if p.Type == nil || *p.Type == "" {
		return api.String
	}
	return *p.Type
}

// paramValue converts text to the JSON value of a param of type typ, or
// says why it is not one.
func paramValue(typ api.ParamType, text string) (any, error) {
	switch typ {
	case api.Number:
		f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%q is not a finite number", text)
		}
		return f, nil
	case api.Boolean:
		switch text {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, fmt.Errorf("%q is neither true nor false", text)
	case api.Json:
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return nil, fmt.Errorf("not JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return v, nil
	case api.String:
		return text, nil
	}
	return nil, fmt.Errorf("the CLI does not know the type %q", typ)
}

// paramNames lists decls' names, or "none".
func paramNames(decls []api.Param) string {
	if len(decls) == 0 {
		return "none"
	}
	names := make([]string, len(decls))
	for i, p := range decls {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// paramsColumn is decls as a table cell: "who:string*, n:number=3" (*
// required, =default), "-" for none.
func paramsColumn(decls []api.Param) string {
	if len(decls) == 0 {
		return "-"
	}
	cells := make([]string, len(decls))
	for i, p := range decls {
		cells[i] = p.Name + ":" + string(paramType(p))
		switch {
		case deref(p.Required):
			cells[i] += "*"
		case p.Default != nil:
			def, _ := json.Marshal(p.Default)
			if s, ok := p.Default.(string); ok {
				def = []byte(s)
			}
			cells[i] += "=" + string(def)
		}
	}
	return strings.Join(cells, ", ")
}
