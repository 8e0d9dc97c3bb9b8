# herald: run `make help` for the targets.

GO       ?= go
PKGS     ?= ./...
# staticcheck, pinned, with its default checks, over every build tag's files.
STATICCHECK_PKG := honnef.co/go/tools/cmd/staticcheck@v0.8.2
STATICCHECK := $(GO) run $(STATICCHECK_PKG)
POSTGRES ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
AMQP     ?= amqp://guest:guest@127.0.0.1:5672/
PGBOUNCER ?= postgres://postgres@127.0.0.1:6432/postgres?sslmode=disable

# -trimpath: compiled packages and test binaries carry no checkout path, so
# the build cache serves a second clone (CI's fresh one) what the first
# compiled; without it every clone recompiles herald's own packages, the
# test binaries of make test and go vet's build-tag sets (minutes on
# two cores). The processes tests start are built with it too (go build
# reads GOFLAGS).
#
# -ldflags=-w: no DWARF in what make links. Every go test run links its
# test binary again (the build cache keeps compiled packages, not linked
# binaries): some sixty links in make test, each a third cheaper without
# the debugging tables (cmd/herald's test binary: 4.5 s of CPU, 3.1 s
# without). Stack traces need no DWARF; a debugger does, so make build
# keeps it (and the caller's own GOFLAGS). A -ldflags on a command line
# replaces this one.
GOFLAGS += -trimpath -ldflags=-w
export GOFLAGS

# Integration tests need the real services; under make they must not skip.
export HERALD_REQUIRE_SERVICES = 1
export HERALD_TEST_POSTGRES_URL ?= $(POSTGRES)
export HERALD_TEST_AMQP_URL ?= $(AMQP)
# scripts/services.sh's PgBouncer (transaction mode) in front of POSTGRES.
export HERALD_TEST_PGBOUNCER_URL ?= $(PGBOUNCER)

.PHONY: help build test services test-go test-go-chaos beside-test-go chaos-short gencheck test-long test-isolation fuzz-short fuzz lint check-deploy check-prometheus bench chaos cluster outbox-study

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/herald
	GOFLAGS='$(filter-out -ldflags=-w,$(GOFLAGS))' $(GO) build -o bin/herald ./cmd/herald

# Each step in turn, with the time it took: CI's log shows where the
# minutes go.
TEST_STEPS := services lint check-deploy test-go-chaos gencheck
test: ## everything CI runs: services, lint, deploy files, all tests
	@for step in $(TEST_STEPS); do start=$$(date +%s); $(MAKE) --no-print-directory $$step || exit 1; \
		echo "make test: $$step took $$(( $$(date +%s) - start ))s"; done
	@echo "make test: all passed"

services: ## start (or install and start) PostgreSQL, RabbitMQ, NATS, the tests' PgBouncer; install chromium
	@scripts/services.sh

# -parallel 4: most end-to-end tests of cmd/herald wait on timers (an
# outage's length, a retry delay) rather than burn CPU; two at a time (the
# default on two cores) left the package at over four minutes.
# The Go client is a module of its own (client/go.mod), which ./... stops
# at: its tests run apart, with go -C. Its tests against the real API run
# in internal/clientcheck, within ./...
test-go: ## unit and integration tests (services required), the client module's included
	@start=$$(date +%s); set -x; \
	$(GO) test -count=1 -timeout 8m -parallel 4 -skip '^TestGeneratorsAcceptDocument$$' $(PKGS) && \
	$(GO) -C client test -count=1 ./...; rc=$$?; { set +x; } 2>/dev/null; \
	echo "make test: test-go took $$(( $$(date +%s) - start ))s"; exit $$rc

# Its own timeout: a cold build cache compiles both generators and the
# generated clients' dependencies (minutes), and a cold npm cache downloads
# the npm tools (under a minute); a warm run takes seconds.
gencheck: ## on the served /openapi.json (tools pinned in internal/gencheck): oapi-codegen and ogen clients compile, Spectral (spectral:oas) finds no fault, docs/api.md's TypeScript example compiles against openapi-typescript's types (tsc --strict)
	$(GO) test -count=1 -timeout 20m -run '^TestGeneratorsAcceptDocument$$' ./internal/api/

test-long: ## provider outages at full length (535 for 1 min, down for 3 min, 451 greylisting for 2 min), the isolation subtests over every broker, the whole store suite through PgBouncer and the table growth study at full size: ~15 minutes
	$(GO) test -count=1 -timeout 15m -tags long -run '^TestLong' ./cmd/herald/
	HERALD_TEST_BROKER_ISOLATION=1 $(GO) test -count=1 -p 1 -timeout 15m -run '^TestPipelineIsolation$$' ./internal/transport/rabbitmq/ ./internal/transport/nats/ ./internal/transport/kafka/ ./internal/transport/sqs/
	HERALD_TEST_LONG=1 $(GO) test -count=1 -timeout 15m -run '^(TestConformancePgBouncer|TestDeliveryCostStaysWithBatchAsTablesGrow)$$' ./internal/store/postgres/

ISOLATION_OUTAGE ?= 2m
test-isolation: ## the isolation subtests at the issue's size on every transport, one package at a time: each fault ISOLATION_OUTAGE long (default 2m), 10,000 webhooks to the busy endpoint: ~1 hour
	HERALD_ISOLATION_OUTAGE=$(ISOLATION_OUTAGE) HERALD_ISOLATION_FAIR_BIG=10000 HERALD_TEST_BROKER_ISOLATION=1 HERALD_ISOLATION_DESTINATIONS=100000 \
		$(GO) test -count=1 -p 1 -timeout 90m -run '^TestPipelineIsolation|^TestManyFailingDestinations$$' ./internal/transport/... ./internal/worker/

# The short chaos run beside the unit and integration tests: it stops and
# restarts only services of its own (a RabbitMQ node, SMTP and webhook
# peers, proxies; pg-terminate ends only its scratch database's backends),
# and its schedule waits on timers far more than it computes. Together
# their processes need more than the 100 connections a fresh PostgreSQL
# allows (FATAL: sorry, too many clients already): scripts/services.sh
# raises max_connections to 300. --output-sync keeps each one's output in
# one piece.
#
# CI shows the start and the end of a long output: a failure of the short
# chaos run (printed first, when it ends) would fall in the middle. Its
# output is kept in CHAOS_LOG too, and its verdicts are printed again last.
CHAOS_LOG ?= $(or $(TMPDIR),/tmp)/herald-chaos-short.log
test-go-chaos: ## test-go, and beside it chaos-short, check-prometheus and fuzz-short
	@rm -f $(CHAOS_LOG); $(MAKE) --no-print-directory -j2 --output-sync=target test-go beside-test-go; rc=$$?; \
	if [ $$rc -ne 0 ] && grep -q -- '--- FAIL' $(CHAOS_LOG) 2>/dev/null; then \
		echo "== the short chaos run failed; its verdicts again (all of it: $(CHAOS_LOG)):"; \
		grep -E -- '--- FAIL|Error:|Messages:|^ *FAIL |FAILED: |NOT drained|^ *chaos: ' $(CHAOS_LOG) | cut -c1-600 | tail -60; \
	fi; exit $$rc

# What runs beside test-go, one after another: the short chaos run, then
# the real Prometheus check and the short fuzz runs (one fuzz worker each).
# With a warm build cache the three took 335-389 s, 80-102 s and 97-107 s
# in CI, less than test-go's 642-674 s. A third lane (the fuzz runs and
# the Prometheus check beside the chaos run) was tried: it saved nothing
# on a warm cache, and its extra load beside test-go came with failures of
# a timing-sensitive test (sqs.TestFIFOPark).
beside-test-go:
	@for step in chaos-short check-prometheus "fuzz-short FUZZFLAGS=-parallel=1"; do start=$$(date +%s); $(MAKE) --no-print-directory $$step || exit 1; \
		echo "make test: beside test-go, $${step%% *} took $$(( $$(date +%s) - start ))s"; done

chaos-short: ## the short chaos run (300 notifications, every fault once, table and RabbitMQ; pg-failover alone beside it on the table transport, 120 notifications): about 2.5 minutes
	@rc=$(CHAOS_LOG).rc; { $(GO) test -count=1 -timeout 10m -p 1 -tags outage ./cmd/herald-chaos/ 2>&1; echo $$? > $$rc; } | tee $(CHAOS_LOG); exit $$(cat $$rc)

# -fuzzminimizetime 1x: minimising a new interesting input can outlast a short
# -fuzztime and end the run with "context deadline exceeded"; a short run only
# looks for crashes. -fuzztime as a count of executions (not a duration): a
# duration's deadline could still end the run that way (seen in CI with 10s).
# 5000 executions each: the two targets of internal/api run about 1000 a
# second on two cores, so 20000 cost some 40s of make test for a run that
# only looks for crashes; make fuzz is the long search.
FUZZSHORT ?= 5000x
fuzz-short: ## a short fuzz run of the request decoder, the list query parser, the cursor decoder, the validators (email, webhook, Telegram) and the event decoder
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCreateRequest$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/api/
	$(GO) test -run '^$$' -fuzz '^FuzzListQuery$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/api/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCursor$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/notify/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/sender/mail/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/notify/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/sender/webhook/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZSHORT) -fuzzminimizetime 1x $(FUZZFLAGS) ./internal/sender/telegram/

FUZZTIME ?= 2m
fuzz: ## longer fuzz runs, the HTTP create path included (FUZZTIME each)
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCreateRequest$$' -fuzztime $(FUZZTIME) ./internal/api/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/notify/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./internal/sender/mail/
	$(GO) test -run '^$$' -fuzz '^FuzzCreate$$' -fuzztime $(FUZZTIME) ./internal/api/
	$(GO) test -run '^$$' -fuzz '^FuzzListQuery$$' -fuzztime $(FUZZTIME) ./internal/api/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCursor$$' -fuzztime $(FUZZTIME) ./internal/notify/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./internal/sender/webhook/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./internal/sender/telegram/

# Every build tag that adds files: one vet and one staticcheck over all of
# them at once see every file but the -tags nobench build's own (no file
# is built only without one of these tags), in one type-check per package
# instead of one per tag.
ALL_TAGS := outage,long,deploycheck,study,bulkbench,figures

lint: ## gofmt, go vet and staticcheck (the client module's too, and its go.mod tidy)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags $(ALL_TAGS) $(PKGS)
	$(GO) vet -tags nobench ./cmd/herald/
	$(GO) -C client vet ./...
	$(GO) -C client mod tidy -diff
	$(STATICCHECK) -tags $(ALL_TAGS) ./...
	$(GO) -C client run $(STATICCHECK_PKG) ./...

check-deploy: ## promtool checks and unit tests of the Prometheus rules, dashboard JSON
	@scripts/check-deploy.sh

# A real Prometheus (Debian's, installed by the services script) scrapes a
# running herald with the shipped configuration: every dashboard query and
# alert rule returns data, exemplars arrive, the relay-down alerts fire
# (about 80 seconds).
check-prometheus: ## the deploy/ configuration, rules and dashboard against a real Prometheus scraping herald
	$(GO) test -count=1 -timeout 5m -tags deploycheck -run '^TestDeployPrometheus$$' ./cmd/herald/

chaos: services ## reliability harness under faults on every transport (HERALD_CHAOS_TRANSPORTS, HERALD_CHAOS_N default 5000; HERALD_CHAOS_CLUSTER=1 adds a 3-node RabbitMQ run; HERALD_CHAOS_PG: each run's PostgreSQL, sync by default: a primary and a synchronous standby, failed over)
	$(GO) run ./cmd/herald-chaos

cluster: services ## RabbitMQ cluster tests on nodes of their own: leader loss, a blocked forward (over a minute)
	HERALD_TEST_RABBITMQ_CLUSTER=1 $(GO) test -count=1 -p 1 -run 'TestClusterLeaderLoss|TestBlockedForwardDoesNotHoldAcks' ./internal/transport/rabbitmq/

bench: services ## Go benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# Not part of make test: it fills a scratch database (dropped at the end)
# with HERALD_STUDY_ROWS outbox rows, a few GB at the default, and takes
# tens of minutes. TestOutboxStudySmall runs the same code small in test-go.
outbox-study: ## retention, vacuum and claims on a 10M-row outbox, and the partitioned way (HERALD_STUDY_ROWS, default 10000000); see docs/benchmarks.md
	$(GO) test -count=1 -timeout 3h -tags study -run '^TestOutboxAtScale$$' -v ./internal/store/postgres/
