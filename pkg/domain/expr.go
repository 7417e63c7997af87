package domain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// Limits on every CEL expression Capstan compiles and evaluates: a step's
// `if`, concurrency and rate-limit keys, a fairness key, a trigger's filter
// and param mappings. The cost unit is cel-go's: about one per operation,
// one per element a macro such as all or exists visits, and a tenth per
// character a string function scans; on a slow shared core one unit takes
// about 100 ns.
const (
	// MaxExprBytes bounds an expression's source, in bytes.
	MaxExprBytes = 4 << 10
	// MaxExprCost bounds one evaluation of one expression, in cost units:
	// past it the evaluation stops and fails. It also bounds the static
	// estimate at compile time (see EstimatedInputSize).
	MaxExprCost = 100_000
	// MaxBatchCost bounds the evaluations of one decision together, in
	// cost units: the conditions of one progression of a run
	// (Evaluate), a run's keys, one step's task keys, one delivery of a
	// trigger. Once they spent it, the next evaluation fails.
	MaxBatchCost = 1_000_000
	// MaxBatchTime bounds the evaluations of one decision together in wall
	// time, from the first: a comprehension checks it every
	// exprInterruptEvery iterations, and an evaluation that starts past it
	// fails. It backs MaxBatchCost up (a cost counts operations, not time),
	// and bounds how long a decision holds its run's locks.
	MaxBatchTime = 100 * time.Millisecond
	// EstimatedInputSize is the size the static estimate at compile time
	// takes each input list, map and string to have at most (elements or
	// characters): an expression whose estimate then exceeds MaxExprCost
	// (nested comprehensions, large literal lists) is refused before it
	// runs. What larger inputs add is bounded when it runs.
	EstimatedInputSize = 50
)

// exprInterruptEvery is how many comprehension iterations run between two
// checks of the decision's deadline.
const exprInterruptEvery = 100

// ErrExprLimit: an evaluation exceeded MaxExprCost, MaxBatchCost or
// MaxBatchTime. It wraps as "<ErrExprLimit>: <which>".
var ErrExprLimit = errors.New("expression limit exceeded")

// compileExpr compiles a CEL expression in env and estimates its cost
// (EstimatedInputSize), and returns its checked AST and its program, which
// stops past MaxExprCost and checks its context every exprInterruptEvery
// iterations. Errors: longer than MaxExprBytes; does not compile; its
// estimated cost exceeds MaxExprCost.
func compileExpr(env *cel.Env, expr string) (*cel.Ast, cel.Program, error) {
	if len(expr) > MaxExprBytes {
		return nil, nil, fmt.Errorf("is %d bytes; at most %d", len(expr), MaxExprBytes)
	}
	checked, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, nil, fmt.Errorf("does not compile: %s", oneLine(iss.Err().Error()))
	}
	est, err := env.EstimateCost(checked, inputSizes{})
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("its cost cannot be estimated: %s", oneLine(err.Error()))
	case est.Max > MaxExprCost:
		return nil, nil, fmt.Errorf("may cost %s evaluating inputs of %d elements; at most %d (nest fewer comprehensions, or use smaller literal lists)",
			costText(est.Max), EstimatedInputSize, MaxExprCost)
	}
	prog, err := env.Program(checked, cel.CostLimit(MaxExprCost), cel.InterruptCheckFrequency(exprInterruptEvery))
	if err != nil {
		return nil, nil, fmt.Errorf("does not compile: %s", oneLine(err.Error()))
	}
	return checked, prog, nil
}

// costText writes an estimated cost; an overflow is "more than 10^19".
func costText(c uint64) string {
	if c == ^uint64(0) {
		return "more than 10^19"
	}
	return fmt.Sprint(c)
}

// inputSizes is the static estimate's view of the inputs: every list, map
// and string an expression reads holds at most EstimatedInputSize elements.
type inputSizes struct{}

var _ checker.CostEstimator = inputSizes{}

func (inputSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: EstimatedInputSize}
}

func (inputSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// exprBudget is what the evaluations of one decision spend together:
// MaxBatchCost cost units and MaxBatchTime from the first. The zero value
// is a fresh budget; done releases its timer. It is not safe for
// concurrent use.
type exprBudget struct {
	ctx    context.Context
	cancel context.CancelFunc
	spent  uint64
}

// eval evaluates prog over vars within the budget, and charges it what the
// evaluation cost (MaxExprCost when it stopped at its limit). Errors:
// ErrExprLimit (wrapped, saying which limit); cel-go's evaluation errors.
func (b *exprBudget) eval(prog cel.Program, vars map[string]any) (ref.Val, error) {
	if b.spent >= MaxBatchCost {
		return nil, fmt.Errorf("%w: the expressions of one decision cost more than %d together", ErrExprLimit, MaxBatchCost)
	}
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithTimeout(context.Background(), MaxBatchTime)
	}
	if b.ctx.Err() != nil {
		return nil, b.timeUp()
	}
	out, det, err := prog.ContextEval(b.ctx, vars)
	if det != nil && det.ActualCost() != nil {
		b.spent += *det.ActualCost()
	} else {
		b.spent += MaxExprCost
	}
	var cancelled interpreter.EvalCancelledError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return nil, fmt.Errorf("%w: it cost more than %d units", ErrExprLimit, MaxExprCost)
	case errors.Is(err, interpreter.InterruptError{}) || errors.Is(err, context.DeadlineExceeded):
		return nil, b.timeUp()
	}
	return nil, err
}

// timeUp is the error of an evaluation past the budget's deadline.
func (b *exprBudget) timeUp() error {
	return fmt.Errorf("%w: the expressions of one decision ran past %s together", ErrExprLimit, MaxBatchTime)
}

// done releases the budget's timer.
func (b *exprBudget) done() {
	if b.cancel != nil {
		b.cancel()
	}
}
