package store

import "context"

// holdKey carries WithHold's function in a context.
type holdKey struct{}

// WithHold returns ctx whose InTx calls run hold between the insert of
// their events and their commit.
func WithHold(ctx context.Context, hold func()) context.Context {
	return context.WithValue(ctx, holdKey{}, hold)
}

func init() {
	beforeCommit = func(ctx context.Context) {
		if hold, ok := ctx.Value(holdKey{}).(func()); ok {
			hold()
		}
	}
}

// The listing-only predicates, for the plan tests.
const (
	SQLListedByCreation = sqlListedByCreation
	SQLListedByID       = sqlListedByID
)
