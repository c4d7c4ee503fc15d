# coopgrid — see README.md. Every target installs what it needs itself.
GO        ?= go
BIN       := bin/peer
PKGS      := ./...
STATICCHECK_VERSION := v0.8.2

.PHONY: all build test test-race bench sim demo lint clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/peer

# The full test suite: vet, every package's tests, and the race detector on
# the packages with concurrency.
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)

test-race:
	$(GO) test -count=1 -race -timeout 20m ./consensus/... ./p2p/... ./policy/sim/...

# Every benchmark; the figures go into docs/BENCHMARKS.md by hand, with the
# machine they were measured on.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS) | tee bench.out

# Regenerates every number and figure of docs/REPRODUCTION.md.
sim: build
	./$(BIN) reproduce --out docs/reproduction

# Until the embedded four-peer federation demo lands (issue 6), the demo is
# the simulator on the dissertation's Model 1: EHOSEP and HOSEP side by side.
demo: build
	./$(BIN) sim --scenario examples/scenarios/model1.yaml --policy hosep --late U1 --limit 80% --runs 20
	./$(BIN) sim --scenario examples/scenarios/model1.yaml --policy ehosep --late U1 --limit 80% --runs 20

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

clean:
	rm -rf bin bench.out
