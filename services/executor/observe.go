package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// newRegistry returns the executor's Prometheus registry: the Go and
// process collectors, capstan_executor_slots (its capacity) and
// capstan_executor_attempts_held (the attempts it holds now).
func newRegistry(sup *supervisor.Supervisor, slots int) *prometheus.Registry {
	reg := svc.NewRegistry()
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "capstan_executor_slots",
			Help: "Attempts the executor runs at once (CAPSTAN_EXECUTOR_SLOTS)."}, func() float64 { return float64(slots) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "capstan_executor_attempts_held",
			Help: "Attempts the executor holds, from their start to their final report."},
			func() float64 { return float64(len(sup.Held())) }))
	return reg
}

// dependencies returns the executor's readiness check: Redis (its queue)
// answers a PING, and the api's /readyz (which checks Postgres and its
// migrations) answers 200. Its error names what failed ("redis: …",
// "api: …", joined).
func dependencies(redis *asynq.Client, apiURL string) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		if err := redis.Ping(); err != nil {
			errs = append(errs, fmt.Errorf("redis: %w", err))
		}
		if err := apiReady(ctx, strings.TrimSuffix(apiURL, "/")+"/readyz"); err != nil {
			errs = append(errs, fmt.Errorf("api: %w", err))
		}
		return errors.Join(errs...)
	}
}

// apiReady GETs url and wants 200.
func apiReady(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}
