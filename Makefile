# coopgrid — see README.md. Every target installs what it needs itself.
GO        ?= go
BIN       := bin/peer
PKGS      := ./...
STATICCHECK_VERSION := v0.8.2

.PHONY: all build test test-race fuzz bench sim demo lint clean

all: build

# The binary names its build (peer version, /v1/status, coopgrid_build_info):
# VERSION is `git describe` of the checkout, COMMIT its full revision; either
# can be given (make build VERSION=v1.2.0). Outside a git checkout both are
# empty and the binary falls back to what Go stamped into it, else "dev".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/peer

# The full test suite: vet, then two passes:
#  - test-unit: every package's tests but consensus' and leader's
#    (multi-peer tests, real peer processes, the demo at CI scale);
#  - test-race-core: consensus and leader under the race detector. That is
#    their one run in `make test`: the same tests and assertions, with the
#    detector on top, so a run without it would prove nothing more.
# These tests mostly wait (elections, heartbeat timeouts, task processes,
# sleeps). Measured alone on the 2-core host: ./node's tests keep 17 % of a
# core busy, ./e2e's 44 %, the race run of ./consensus 21 % and of ./leader
# 16 %. go test starts the packages' tests in the order given, two at a
# time (-p defaults to the cores): the slowest go first (SLOW_PKGS), else
# ./node, last in alphabetical order, ran alone at the end. -parallel 4:
# ./node and ./e2e run their slow, mostly waiting tests (waitsMostly in
# node/helpers_test.go, alongside in e2e/harness_test.go) four at a time.
# The race pass comes after the rest, not beside it: beside it, on a host
# loaded by other work, consensus' and leader's elections lost their
# leaders mid-test twice in two tries (docs/BENCHMARKS.md, "make test,
# session 11"). `make test-race` runs the detector on every concurrent
# package (several minutes more).
SLOW_PKGS := ./node/ ./e2e/ ./executor/slurm/ ./cmd/peer/ ./runner/ ./chaos/ ./ledger/
RACE_CORE := ./consensus/ ./leader/
test:
	$(GO) vet $(PKGS)
	$(MAKE) --no-print-directory test-unit test-race-core

.PHONY: test-unit test-race-core
# $(PKGS) without $(RACE_CORE), the slow packages first when it is ./...
UNIT_PKGS = $(filter-out %/consensus %/leader,$(shell $(GO) list $(if $(filter ./...,$(PKGS)),$(SLOW_PKGS)) $(PKGS)))
test-unit:
	@test -n "$(UNIT_PKGS)" || { echo "go list $(SLOW_PKGS) $(PKGS) listed nothing" >&2; exit 1; }
	@echo "$(GO) test -count=1 -timeout 20m -parallel 4 $(SLOW_PKGS) $(PKGS), but $(RACE_CORE)"
	@$(GO) test -count=1 -timeout 20m -parallel 4 $(UNIT_PKGS)

test-race-core:
	$(GO) test -count=1 -race -timeout 20m $(RACE_CORE)

test-race:
	$(GO) test -count=1 -race -timeout 30m ./consensus/ ./leader/ ./gossip/ ./p2p/ ./node/ ./api/... ./checkpoint/ ./executor/ ./lab/sim/ ./runner/

# Short fuzz runs of every decoder (the seed corpora already run in
# `make test`); FUZZTIME=5m for a longer campaign. docs/RELIABILITY.md.
# The default is a count of executions, not a duration: with a duration,
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when the time runs out while a worker is busy (golang/go#75804,
# fixed in Go 1.27; seen on FuzzApply in CI).
FUZZTIME ?= 20000x
FUZZ_TARGETS := ./lab/scenario:FuzzParse ./jobfile:FuzzParse ./ledger:FuzzApply ./ledger:FuzzApplyLive ./ledger:FuzzSignedCommand \
	./checkpoint:FuzzUnpack ./p2p:FuzzFrame ./gossip:FuzzHeartbeat
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name: -fuzztime $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

# Every benchmark, as markdown tables in the format of docs/BENCHMARKS.md
# (bench.md, headed by the machine), with the raw output in bench.out.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS) | tee bench.out
	$(GO) run ./internal/benchtable < bench.out > bench.md
	@echo "wrote bench.md (tables) and bench.out (raw)"

# Regenerates every number and figure of docs/REPRODUCTION.md.
sim: build
	./$(BIN) reproduce --out docs/reproduction

# The embedded federation (issue 6): four real peers in one process (libp2p
# on loopback, Raft, the simulated executor) on the dissertation's Model 1
# scaled down, U1 late at 80 %, the leader killed half way. About a minute;
# `./bin/peer demo --help` for --orgs, --scale, --keep, --json, --out.
demo: build
	./$(BIN) demo

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

clean:
	rm -rf bin bench.out bench.md

# The fault-injection matrix (issue 7, docs/RELIABILITY.md): federations of
# real peer processes, a concurrent workload, kill -9 / SIGSTOP faults from
# a logged seed, then the checks. Several minutes; not part of `make test`
# (which runs one smoke scenario). Replay: CHAOS_SEED=n make chaos.
.PHONY: chaos
chaos:
	COOPGRID_CHAOS=1 $(GO) test -count=1 -timeout 45m -v -run 'TestChaos$$|TestTaskModel' ./chaos/

# Rolling upgrade (issue 17, docs/RELIABILITY.md#rolling-upgrade): builds the
# previous release's peer from git history, forms a federation of three real
# peers with it and upgrades them one by one to this checkout's build with
# tasks running. `make test` runs it with 6 tasks a batch; this target with
# UPGRADE_TASKS (default 20).
UPGRADE_TASKS ?= 20
.PHONY: upgrade-test
upgrade-test:
	COOPGRID_UPGRADE_TASKS=$(UPGRADE_TASKS) $(GO) test -count=1 -timeout 30m -v -run 'TestRollingUpgrade$$' ./e2e/

# Only the Slurm backend's tests (issue 18, docs/SLURM.md), on private
# single-host Slurms of their own; they are part of `make test` too, and
# skip there, saying why, without slurm-wlm and munge or root.
.PHONY: test-slurm
test-slurm:
	$(GO) test -count=1 -v -run 'Slurm|TestParse|TestHelpers|TestOutcome' ./executor/slurm/... ./node/

# End-to-end throughput beside Slurm (issue 9, docs/BENCHMARKS.md): installs
# slurm-wlm and munge with apt-get if missing, then alternates a private
# single-host Slurm (its own munge key, state and ports) and federations of
# real peer processes running `true`, and prints tasks/s and the ratio; each
# repeat also times the host alone running the same `true` processes 64 at a
# time, and coopgrid's rate as a fraction of it (issue 22).
# About an hour with the defaults; SIZES="1000" REPEATS=3, VARIANTS="A",
# SLURM_MODES="array", PROFILE=1 (perf + Raft-log timeline), OUT=dir.
.PHONY: bench-e2e
bench-e2e:
	bash bench/e2e/run.sh

# What an idle federation costs (issue 17, docs/BENCHMARKS.md): N real peer
# processes on loopback (simulated executor), formed with peer init /
# invite / run --bootstrap; each process's CPU over an idle WINDOW from
# /proc/PID/stat, then a fail-over (kill -9 of the leader). PERF=1 also
# records the leader with perf; ARGS="--set heartbeat.interval=5s" etc.
N      ?= 10
WINDOW ?= 30s
.PHONY: bench-idle
bench-idle: build
	N=$(N) WINDOW=$(WINDOW) bash bench/idle/run.sh
