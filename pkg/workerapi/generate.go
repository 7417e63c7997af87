// Package workerapi holds the Go types, the echo strict-server interfaces and
// the client generated from openapi/worker.yaml, the executor-facing API of
// the control plane (register, heartbeat, read and report attempts, ship
// logs). The types it shares with the public API are pkg/api's. Never edit
// workerapi.gen.go: run `make generate`.
package workerapi

//go:generate go tool oapi-codegen -config ../../openapi/worker.cfg.yaml ../../openapi/worker.yaml
