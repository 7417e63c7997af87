package svc

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/hibiken/asynq"
)

// AsynqLogger routes asynq's own logs to log under the fixed message "asynq",
// its text in the detail attribute.
func AsynqLogger(log *slog.Logger) asynq.Logger {
	return asynqLogger{log.With("component", "asynq")}
}

// AsynqLevel is the asynq level matching log's: asynq formats a debug line on
// every idle poll, so it should only do so when log would keep it.
func AsynqLevel(ctx context.Context, log *slog.Logger) asynq.LogLevel {
	switch {
	case log.Enabled(ctx, slog.LevelDebug):
		return asynq.DebugLevel
	case log.Enabled(ctx, slog.LevelInfo):
		return asynq.InfoLevel
	case log.Enabled(ctx, slog.LevelWarn):
		return asynq.WarnLevel
	}
	return asynq.ErrorLevel
}

type asynqLogger struct{ log *slog.Logger }

var _ asynq.Logger = asynqLogger{}

func (l asynqLogger) Debug(args ...any) { l.log.Debug("asynq", "detail", fmt.Sprint(args...)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info("asynq", "detail", fmt.Sprint(args...)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn("asynq", "detail", fmt.Sprint(args...)) }
func (l asynqLogger) Error(args ...any) { l.log.Error("asynq", "detail", fmt.Sprint(args...)) }

// Fatal logs and exits 1, as asynq.Logger requires.
func (l asynqLogger) Fatal(args ...any) {
	l.log.Error("asynq fatal", "detail", fmt.Sprint(args...))
	os.Exit(1)
}
