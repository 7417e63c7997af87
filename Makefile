# Capstan — the two commands a user needs: `make demo` and `make test`.
SHELL := /bin/bash
MODULES := e2e pkg services/api services/scheduler services/abort-reconciler services/executor cmd/capstan deploy
PACKAGES := $(addprefix ./,$(addsuffix /...,$(MODULES)))
SERVICES := api scheduler abort-reconciler executor
BIN := $(CURDIR)/bin
FUZZTIME ?= 3s
export PATH := $(shell go env GOROOT)/bin:$(PATH)

.PHONY: deps deps-stop kube-deps kube-deps-stop generate check-generate build dist migrate up down demo test fuzz bench chaos lint vendor-redoc

deps: ## install (if missing) and start Postgres and Redis on loopback
	@scripts/dev-deps.sh start >/dev/null

deps-stop:
	@scripts/dev-deps.sh stop

# The TypeScript SDK's types come from the openapi-typescript openapi/package.json
# pins (npm ci there when node_modules is missing or older than the lock), run
# in sdk/typescript, away from openapi/redocly.yaml, which it would read.
generate: ## regenerate the OpenAPI server and clients (Go, and the TypeScript SDK's types), and schema/ (the JSON Schemas of workflow files; the dashboard serves a copy of workflow.json, the api one of openapi/capstan.yaml)
	cd pkg && go generate ./api ./workerapi ./executorapi
	@[ openapi/node_modules/.package-lock.json -nt openapi/package-lock.json ] || npm ci --prefix openapi --no-audit --no-fund --loglevel=error
	cd sdk/typescript && ../../openapi/node_modules/.bin/openapi-typescript ../../openapi/capstan.yaml -o src/schema.d.ts >/dev/null
	cp schema/workflow.json services/api/internal/ui/static/schema/workflow.json
	cp openapi/capstan.yaml services/api/internal/apidoc/static/openapi.yaml

check-generate: generate ## fail when the generated code is stale
	@git diff --exit-code -- pkg/api pkg/workerapi pkg/executorapi schema services/api/internal/ui/static/schema services/api/internal/apidoc/static/openapi.yaml sdk/typescript/src/schema.d.ts && test -z "$$(git status --porcelain -- schema pkg/workerapi)" || { echo "generated code is stale: run make generate and commit"; exit 1; }

build: ## build every service and the CLI into bin/
	@mkdir -p $(BIN)
	@for s in $(SERVICES); do go build -o $(BIN)/capstan-$$s ./services/$$s || exit 1; done
	@go build -o $(BIN)/capstan ./cmd/capstan
	@echo "built: $$(ls $(BIN) | tr '\n' ' ')"

# dist stamps the CLI with pkg/buildinfo's Version (git describe), Commit and
# Date, and checksums the binaries in dist/SHA256SUMS (sha256sum -c reads it).
DIST := $(CURDIR)/dist
DIST_VERSION ?= $(shell git describe --tags --always --dirty)
BUILDINFO := github.com/capstan-run/capstan/pkg/buildinfo
dist: ## cross-compile the capstan CLI for linux and darwin, amd64 and arm64, into dist/
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@commit=$$(git rev-parse HEAD)$$(git diff --quiet HEAD || echo -dirty); date=$$(date -u +%Y-%m-%dT%H:%M:%SZ); \
	for os in linux darwin; do for arch in amd64 arm64; do \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -o $(DIST)/capstan-$$os-$$arch \
	    -ldflags "-s -w -X $(BUILDINFO).Version=$(DIST_VERSION) -X $(BUILDINFO).Commit=$$commit -X $(BUILDINFO).Date=$$date" \
	    ./cmd/capstan || exit 1; \
	done; done
	@cd $(DIST) && { command -v sha256sum >/dev/null && sha256sum capstan-* || shasum -a 256 capstan-*; } > SHA256SUMS
	@echo "dist $(DIST_VERSION): $$(cd $(DIST) && ls | tr '\n' ' ')"

migrate: deps build ## apply the SQL migrations
	@eval "$$(scripts/dev-deps.sh env)"; export CAPSTAN_DATABASE_URL; $(BIN)/capstan-api migrate

up: ## start Postgres, Redis and the four services (two executors) in the background
	@scripts/up.sh

down: ## stop what `make up` started
	@scripts/down.sh

demo: ## start everything and run the example workflows
	@scripts/demo.sh

test: deps ## the whole suite, with the race detector, against real Postgres, Redis and a Kubernetes API server
	@scripts/kube-deps.sh start >/dev/null || { echo "the test Kubernetes cluster did not start (scripts/kube-deps.sh): the kubernetes plugin's tests need it"; exit 1; }
	@status=0; go test -race -count=1 -timeout 30m $(PACKAGES) || status=$$?; scripts/kube-deps.sh stop; exit $$status
	@$(MAKE) --no-print-directory fuzz

kube-deps: ## build (first time: minutes) and start the test Kubernetes cluster: API server, scheduler, controller manager, kwok
	@scripts/kube-deps.sh start

kube-deps-stop:
	@scripts/kube-deps.sh stop

# A run that fails without writing a failing input (go test says "Failing
# input written to ..." when the code fails) is the fuzzing engine's own
# failure, e.g. a worker timing out on a loaded machine: it is shown and
# tried once more.
fuzz: ## run every fuzz target briefly (FUZZTIME, default 3s each)
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' pkg services | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$pkg/*_test.go | sed 's/func //'); do \
	    out=$$(go test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) ./$$pkg 2>&1) || { echo "$$out"; \
	      if echo "$$out" | grep -q 'Failing input written to'; then echo "fuzz $$pkg $$f failed"; exit 1; fi; \
	      echo "fuzz $$pkg $$f: the engine failed without a failing input; once more"; \
	      go test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) ./$$pkg >/dev/null || { echo "fuzz $$pkg $$f failed"; exit 1; }; }; \
	    echo "ok   fuzz $$pkg $$f ($(FUZZTIME))"; \
	  done; \
	done

bench: deps ## benchmarks: a table of figures vs targets, and .data/bench/latest.json (scripts/bench; never fails on a target)
	@scripts/bench

chaos: deps ## the full chaos suite: 1000 runs while services die, Redis is wiped, Postgres restarts (run it alone)
	@set -o pipefail; CAPSTAN_CHAOS_RUNS=$${CAPSTAN_CHAOS_RUNS:-1000} CAPSTAN_CHAOS_PG_RESTART=1 go test -count=1 -timeout 60m -run '^TestChaos' -v ./e2e/ | grep -E '^(---|ok|FAIL|PASS)|chaos_test'

vendor-redoc: ## copy the Redoc bundle /docs/ serves from the npm package redoc that openapi/package.json pins
	@[ openapi/node_modules/.package-lock.json -nt openapi/package-lock.json ] || npm ci --prefix openapi --no-audit --no-fund --loglevel=error
	cp openapi/node_modules/redoc/bundles/redoc.standalone.js openapi/node_modules/redoc/bundles/redoc.standalone.js.LICENSE.txt services/api/internal/apidoc/static/docs/
	cp openapi/node_modules/redoc/LICENSE services/api/internal/apidoc/static/docs/redoc.LICENSE

# staticcheck is pinned, with its checksums, by the tool directive of
# tools/go.mod, a module go.work leaves out so that its dependencies never join
# the services' build list. `go tool -n` builds it into the build cache and
# prints its path; it then runs here, in workspace mode, over every module's
# packages and their tests, with the default checks.
# The OpenAPI linters are the locked npm packages of openapi/ (npm ci when
# node_modules is missing or older than the lock); Redocly runs its strict
# recommended rules and Spectral fails on a warning. openapi/client-check.ts
# then compiles against the TypeScript types openapi-typescript generates
# (in a temporary directory, away from redocly.yaml, which it would read).
# The TypeScript SDK (sdk/typescript, its own locked packages) then
# type-checks under its strict tsconfig, with its type tests.
lint: ## gofmt, go vet and staticcheck over every module; Redocly and Spectral over openapi/capstan.yaml and worker.yaml; a generated TypeScript client over capstan.yaml; the TypeScript SDK's types
	@[ openapi/node_modules/.package-lock.json -nt openapi/package-lock.json ] || npm ci --prefix openapi --no-audit --no-fund --loglevel=error
	@cd openapi && node_modules/.bin/redocly lint capstan.yaml worker.yaml --format=stylish && node_modules/.bin/spectral lint --fail-severity=warn capstan.yaml worker.yaml
	@d=$$(mktemp -d) && o=$(CURDIR)/openapi && (cd $$d && $$o/node_modules/.bin/openapi-typescript $$o/capstan.yaml -o capstan.d.ts >/dev/null) && \
	  cp openapi/client-check.ts $$d/ && openapi/node_modules/.bin/tsc --noEmit --strict $$d/client-check.ts; s=$$?; rm -rf $$d; exit $$s
	@[ sdk/typescript/node_modules/.package-lock.json -nt sdk/typescript/package-lock.json ] || npm ci --prefix sdk/typescript --no-audit --no-fund --loglevel=error
	@sdk/typescript/node_modules/.bin/tsc -p sdk/typescript --noEmit
	@out=$$(gofmt -l $(MODULES)); [ -z "$$out" ] || { echo "gofmt would change:"; echo "$$out"; exit 1; }
	@go vet $(PACKAGES)
	@staticcheck=$$(GOWORK=off go -C tools tool -n staticcheck) && $$staticcheck $(PACKAGES)
