# Herald's two set-up commands are `make dev` and `make test`; see README.md.
.PHONY: help dev test test-unit lint build vet temporal-cli clean bench chaos
.DEFAULT_GOAL := help

GO ?= go
# The Go release Herald is built and tested with (go.mod's toolchain line, which
# a go command set to GOTOOLCHAIN=local would ignore): the go command downloads
# it from the module proxy once. Override on the command line only knowingly.
export GOTOOLCHAIN := go1.27.3

## dev: run the whole system locally with demo data (PostgreSQL, Temporal, worker, example subscriber)
dev:
	scripts/dev.sh

## test: make lint, promtool tests of the alert rules, and all tests (race detector) against real PostgreSQL and Temporal
test:
	scripts/test.sh

## test-unit: the quick loop: every test that needs no PostgreSQL, Temporal or worker process (go test -short), under a minute
test-unit:
	$(GO) test -short -count=1 ./...

## lint: gofmt, go vet, staticcheck, Temporal's workflowcheck and govulncheck (skipped, saying so, when its database is unreachable) (pinned, built into .tools/bin once)
lint:
	scripts/lint.sh

## build: compile the binaries into bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./workers ./starter ./examples/subscriber

## bench: Herald against the bare Temporal ceiling on two dev servers: default settings, then eager activity execution on (issues 6, 13); BENCH_FLAGS="-servers default -shapes A -steady 0" etc.
bench:
	$(GO) run ./bench $(BENCH_FLAGS)

## chaos: fault-injection suite (issue 7): kills, restarts and a flapping subscriber while events flow; ~5 min.
##        Its own Temporal dev server runs with default settings; HERALD_CHAOS_EAGER=1 make chaos turns eager activity execution on
##        It also terminates, resets and forges signals to key workflows; HERALD_CHAOS_WORKFLOW_FAULTS=0 leaves that out
##        HERALD_CHAOS_END_QUIET_KEYS=1 runs the workers with HERALD_END_QUIET_KEYS=true
chaos:
	scripts/temporal.sh install >/dev/null
	$(GO) test -tags chaos -count=1 -v -timeout 30m ./chaos/

vet:
	$(GO) vet ./...

## temporal-cli: build the pinned Temporal CLI into .tools/bin
temporal-cli:
	scripts/temporal.sh install

## clean: stop local services and remove local state (keeps the built Temporal CLI)
clean:
	-scripts/dev.sh stop
	rm -rf .dev bin

## help: list the targets (the default goal)
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); split($$0, a, ":"); printf "  %-14s%s\n", a[1], substr($$0, length(a[1]) + 2); next } /^##  / { sub(/^## +/, ""); printf "  %-14s%s\n", "", $$0 }' $(MAKEFILE_LIST)
