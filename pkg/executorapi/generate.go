// Package executorapi holds the types, the echo strict-server interfaces and
// the client generated from openapi/executor.yaml, the small API each executor
// serves. Never edit executorapi.gen.go: run `make generate`.
package executorapi

//go:generate go tool oapi-codegen -config ../../openapi/executor.cfg.yaml ../../openapi/executor.yaml
