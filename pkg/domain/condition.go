package domain

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// Condition is a step's compiled `if` expression: CEL (as Kubernetes uses),
// over `steps.<name>.phase`, `steps.<name>.outputs.<key>`, `run.failed` and
// `params.<name>`. A step name with a dash is read with an index:
// `steps["my-step"].phase`. Numbers compare across int and double, so
// `params.count > 3` holds for a number param of 4.
type Condition struct {
	prog cel.Program
	// Steps names the steps the expression reads, sorted, once each.
	Steps []string
	// Params names the params the expression reads as params.<name> or
	// params["<name>"], sorted, once each.
	Params []string
	// readsAnySteps is set when the expression reads steps other than as
	// steps.<name> or steps["<name>"] (a comprehension over steps, an
	// index it computes): it may read any step, not only Steps.
	readsAnySteps bool
}

// CondVars is what a condition reads: each step's phase and outputs,
// whether any step of the run failed, and the run's params (name → value as
// ResolveParams returns them: string, float64, bool or a decoded JSON
// value; nil reads as no params).
type CondVars struct {
	Steps  map[string]StepStatus
	Failed bool
	Params map[string]any
}

// conditionEnv declares the variables a condition may read.
var conditionEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("steps", cel.MapType(cel.StringType, cel.MapType(cel.StringType, cel.DynType))),
		cel.Variable("run", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("params", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true))
})

// CompileCondition compiles a CEL condition (compileExpr's limits), from
// the cache when it holds it. Errors: longer than MaxExprBytes, does not
// compile, may cost more than MaxExprCost, or is not a boolean.
func CompileCondition(expr string) (*Condition, error) {
	if c, ok := exprs.get("if:" + expr); ok {
		return c.(*Condition), nil
	}
	env, err := conditionEnv()
	if err != nil {
		return nil, err
	}
	checked, prog, err := compileExpr(env, expr)
	if err != nil {
		return nil, err
	}
	if t := checked.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("must be a boolean expression, is %s", checked.OutputType())
	}
	tree := checked.NativeRep().Expr()
	c := &Condition{prog: prog, Steps: referencedKeys(tree, "steps"), Params: referencedKeys(tree, "params"),
		readsAnySteps: !readsOnlyByKey(tree, "steps")}
	exprs.put("if:"+expr, c)
	return c, nil
}

// referencedKeys returns the keys expr reads of the map variable ident, as
// <ident>.<key> or <ident>["<key>"], sorted, once each.
func referencedKeys(expr ast.Expr, ident string) []string {
	var names []string
	isVar := func(e ast.Expr) bool { return e.Kind() == ast.IdentKind && e.AsIdent() == ident }
	ast.PostOrderVisit(expr, ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			if sel := e.AsSelect(); isVar(sel.Operand()) {
				names = append(names, sel.FieldName())
			}
		case ast.CallKind:
			call := e.AsCall()
			if call.FunctionName() != operators.Index || len(call.Args()) != 2 || !isVar(call.Args()[0]) {
				return
			}
			if lit := call.Args()[1]; lit.Kind() == ast.LiteralKind {
				if s, ok := lit.AsLiteral().(types.String); ok {
					names = append(names, string(s))
				}
			}
		}
	}))
	slices.Sort(names)
	return slices.Compact(names)
}

// readsOnlyByKey reports whether expr reads the map variable ident only
// as <ident>.<key> or <ident>["<key>"] (referencedKeys then names every
// key it reads).
func readsOnlyByKey(expr ast.Expr, ident string) bool {
	var uses, keyed int
	isVar := func(e ast.Expr) bool { return e.Kind() == ast.IdentKind && e.AsIdent() == ident }
	ast.PostOrderVisit(expr, ast.NewExprVisitor(func(e ast.Expr) {
		switch {
		case isVar(e):
			uses++
		case e.Kind() == ast.SelectKind && isVar(e.AsSelect().Operand()):
			keyed++
		case e.Kind() == ast.CallKind:
			call := e.AsCall()
			if call.FunctionName() == operators.Index && len(call.Args()) == 2 && isVar(call.Args()[0]) &&
				call.Args()[1].Kind() == ast.LiteralKind {
				if _, ok := call.Args()[1].AsLiteral().(types.String); ok {
					keyed++
				}
			}
		}
	}))
	return uses == keyed
}

// Eval evaluates the condition, a decision of its own (exprBudget).
// Errors: the expression failed at run time, e.g. it read an output the
// step did not write; ErrExprLimit (wrapped) past its limits.
func (c *Condition) Eval(v CondVars) (bool, error) {
	var b exprBudget
	defer b.done()
	return c.eval(&b, v)
}

// eval is Eval within budget b.
func (c *Condition) eval(b *exprBudget, v CondVars) (bool, error) {
	steps := make(map[string]any, len(v.Steps))
	for name, st := range v.Steps {
		outputs := make(map[string]any, len(st.Outputs))
		for k, val := range st.Outputs {
			outputs[k] = val
		}
		steps[name] = map[string]any{"phase": string(st.Phase), "outputs": outputs}
	}
	params := v.Params
	if params == nil {
		params = map[string]any{}
	}
	out, err := b.eval(c.prog, map[string]any{"steps": steps, "run": map[string]any{"failed": v.Failed}, "params": params})
	if err != nil {
		return false, err
	}
	bv, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("the condition is not a boolean")
	}
	return bv, nil
}
