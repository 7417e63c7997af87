module github.com/capstan-run/capstan/services/abort-reconciler

go 1.26

require github.com/capstan-run/capstan/pkg v0.0.0

replace github.com/capstan-run/capstan/pkg => ../../pkg
