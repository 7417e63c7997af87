// Package api holds the Go types, the echo strict-server interfaces and the
// client generated from openapi/capstan.yaml. Never edit api.gen.go: run
// `make generate`.
package api

//go:generate go tool oapi-codegen -config ../../openapi/api.cfg.yaml ../../openapi/capstan.yaml
//go:generate go run ./schemagen ../../openapi/capstan.yaml ../../schema
