package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/google/uuid"
)

// maxRegisterBackoff caps the delay between registration tries.
const maxRegisterBackoff = 5 * time.Second

// register registers the worker under a new identity, retrying transport
// errors and 5xx answers with backoff until it succeeds or ctx ends (the api
// may start after the executor). It records the id and writes IDFile.
// Errors: ErrRejected, ctx's error.
func (a *Agent) register(ctx context.Context) (uuid.UUID, error) {
	req := workerapi.RegisterWorkerRequest{Name: a.cfg.Name, Address: a.cfg.Address, Slots: &a.cfg.Slots,
		Sandbox: &a.cfg.Sandbox}
	if labels := a.labels(); len(labels) > 0 {
		req.Labels = &labels
	}
	if a.cfg.Resources.CpuMillis != nil || a.cfg.Resources.MemoryBytes != nil {
		req.Resources = &a.cfg.Resources
	}
	delay := a.cfg.RegisterBackoff
	for try := 1; ; try++ {
		id, err := a.client.Register(ctx, req)
		if err == nil {
			a.log.Info("registered", "worker_id", id, "address", a.cfg.Address, "slots", a.cfg.Slots,
				"sandbox", a.cfg.Sandbox)
			err = a.writeIDFile(id)
			a.setID(id)
			return id, err
		}
		if errors.Is(err, ErrRejected) {
			return uuid.UUID{}, err
		}
		a.log.Warn("registration failed; retrying", "try", try, "retry_in", delay.String(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return uuid.UUID{}, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, maxRegisterBackoff)
	}
}

// labels are the worker's labels: Config.Labels, then
// domain.PluginLabel(p)="true" for each of Config.Plugins.
func (a *Agent) labels() map[string]string {
	labels := maps.Clone(a.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	for _, p := range a.cfg.Plugins {
		labels[domain.PluginLabel(p)] = "true"
	}
	return labels
}

func (a *Agent) setID(id uuid.UUID) {
	a.mu.Lock()
	a.id = id
	a.mu.Unlock()
}

// writeIDFile replaces IDFile's content with "<id>\n" atomically, so a
// reader never sees a partial id.
func (a *Agent) writeIDFile(id uuid.UUID) error {
	if a.cfg.IDFile == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(a.cfg.IDFile), ".worker-id-*")
	if err != nil {
		return fmt.Errorf("id file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id.String() + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("id file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("id file: %w", err)
	}
	if err := os.Rename(tmp.Name(), a.cfg.IDFile); err != nil {
		return fmt.Errorf("id file: %w", err)
	}
	return nil
}
