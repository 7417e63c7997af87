package store

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// BenchmarkBind compares the two ways a statement's placeholders are bound
// (no statement is sent): gorm's Raw, which rewrites the text byte by byte
// at each call, and raw, which binds a text once and reuses it (bound).
// The statement is AssignTasks', a few kilobytes, with its named values.
func BenchmarkBind(b *testing.B) {
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1"}), &gorm.Config{
		Logger: logger.Discard, SkipDefaultTransaction: true, DisableAutomaticPing: true, DryRun: true})
	if err != nil {
		b.Fatal(err)
	}
	c := &core{db: db}
	ctx := context.Background()
	args := map[string]any{"ids": array([]int64{1, 2}), "workers": array([]string{"a", "b"}),
		"now": time.Now().UTC(), "pending": domain.TaskPending, "assigned": domain.TaskAssigned,
		"running": "RUNNING", "waiting": "QUEUED"}
	b.Run("gorm", func(b *testing.B) {
		for b.Loop() {
			if c.q(ctx).Raw(assignTasksSQL, args).Error != nil {
				b.Fatal("bind")
			}
		}
	})
	b.Run("bound", func(b *testing.B) {
		for b.Loop() {
			if c.raw(ctx, assignTasksSQL, args).Error != nil {
				b.Fatal("bind")
			}
		}
	})
}
