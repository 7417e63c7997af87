module github.com/capstan-run/capstan/services/scheduler

go 1.26

require github.com/capstan-run/capstan/pkg v0.0.0

replace github.com/capstan-run/capstan/pkg => ../../pkg
