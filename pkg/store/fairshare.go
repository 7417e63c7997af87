package store

import (
	"context"

	"github.com/capstan-run/capstan/pkg/domain"
)

// FairWeight returns project's fair-share weight (project_fair_shares),
// domain.DefaultFairWeight when none was set. Errors: Postgres's.
func (s Placement) FairWeight(ctx context.Context, project string) (int, error) {
	var w []int
	if err := s.raw(ctx, `SELECT weight FROM project_fair_shares WHERE project = ?`, project).Scan(&w).Error; err != nil {
		return 0, mapErr(err)
	}
	if len(w) == 0 {
		return domain.DefaultFairWeight, nil
	}
	return w[0], nil
}

// SetFairWeight sets project's fair-share weight, which the caller
// validated (domain.ValidFairWeight; the table's check refuses another).
// Passes read it from their next read on (PendingWork). Errors:
// Postgres's.
func (s Placement) SetFairWeight(ctx context.Context, project string, weight int) error {
	return mapErr(s.exec(ctx, `INSERT INTO project_fair_shares (project, weight, updated_at) VALUES (?, ?, now())
		ON CONFLICT (project) DO UPDATE SET weight = excluded.weight, updated_at = excluded.updated_at`,
		project, weight).Error)
}
