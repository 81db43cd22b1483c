# PML Sandbox. `make run` and `make test` are all a newcomer needs; each
# installs what it lacks (the guest toolchain from Debian's packages, DynamoDB
# Local from npm, Node 22 and the MCP conformance suite from npm) on first use.

GO        ?= go
GUEST     := internal/guest/pml.wasm
GUEST_SRC := guest-runtime/build.sh guest-runtime/glue.c guest-runtime/prelude.js guest-runtime/loopcheck.awk
PML       := bin/pml

# Lambda artifacts, as `sam build` makes them (BuildMethod: makefile).
LAMBDA_GOFLAGS := GOOS=linux GOARCH=arm64 CGO_ENABLED=0
LAMBDA_TAGS    := lambda.norpc

.PHONY: all guest build pml run test unit race fuzz lint bench clean guest-reproducible conformance \
	build-ExecuteFunction build-CapabilityFunction build-AggregateFunction build-AuthorizeFunction check-artifact

all: build

guest: $(GUEST)

$(GUEST): $(GUEST_SRC)
	guest-runtime/build.sh $@

pml: $(PML)

# Static (no cgo), as the functions are: a process then starts without the
# dynamic loader and libc's threads (~1 ms of every pml run).
$(PML): $(GUEST) FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./cmd/pml

FORCE:

## run: a first script, then the local server (HTTP API + MCP endpoint) on
## embedded defaults at 127.0.0.1:8080; Ctrl-C stops it.
run: $(PML)
	$(PML) run examples/hello.js
	$(PML) serve

## test: everything CI runs: lint, all tests (integration included), the
## packages again under the race detector (long loops skipped), every
## fuzz target for FUZZTIME each, and the MCP conformance suite.
test: lint unit race fuzz conformance

unit: $(GUEST)
	$(GO) test -count=1 -timeout 15m ./...

race: $(GUEST)
	$(GO) test -race -short -count=1 -timeout 15m ./internal/...

FUZZTIME ?= 20s
fuzz: $(GUEST)
	scripts/fuzz.sh $(FUZZTIME)

# lint: gofmt, a tidy go.mod, vet, staticcheck, the docs held to the tree
# (internal/doccheck: links, backticked paths, anchors, DESIGN's diagram),
# and cfn-lint on template.yaml.
# cfn-lint is a Python package: CI machines have it on their image, but PyPI
# may be out of reach, so where it is missing the step says so and the rest
# goes on.
lint: $(GUEST)
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$fmt" ]; then echo "gofmt needed: $$fmt"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) test -count=1 ./internal/doccheck/
	@if command -v cfn-lint >/dev/null 2>&1; then \
	  echo "cfn-lint template.yaml"; cfn-lint template.yaml; \
	else \
	  echo "lint: SKIPPED cfn-lint template.yaml: cfn-lint is not installed (pip install cfn-lint)"; \
	fi

## conformance: the official MCP conformance suite (pinned in
## conformance/package-lock.json, on Node 22 from npm), both ways: its client
## scenarios with pml as the client, and its server scenarios against a
## `pml serve` it starts; each judged against its baseline in conformance/.
## Installs Node 22 and the suite into the cache on first use.
conformance: $(PML)
	scripts/conformance.sh

bench: $(PML)
	$(PML) bench

## build: the Lambda artifacts under dist/, as sam build would make them.
build: $(GUEST)
	$(MAKE) build-ExecuteFunction ARTIFACTS_DIR=$(CURDIR)/dist/ExecuteFunction
	$(MAKE) build-CapabilityFunction ARTIFACTS_DIR=$(CURDIR)/dist/CapabilityFunction
	$(MAKE) build-AggregateFunction ARTIFACTS_DIR=$(CURDIR)/dist/AggregateFunction
	$(MAKE) build-AuthorizeFunction ARTIFACTS_DIR=$(CURDIR)/dist/AuthorizeFunction

# Each artifact also ships its guest compiled for Graviton (guest-cache/,
# written by the artifact's own bootstrap under qemu-user; see
# scripts/ship-cache.sh): cold starts with an empty /tmp skip the compile.
# PML_SHIP_CACHE=0 builds without it.
build-ExecuteFunction: $(GUEST)
	mkdir -p $(ARTIFACTS_DIR)
	$(LAMBDA_GOFLAGS) $(GO) build -tags $(LAMBDA_TAGS) -trimpath -ldflags=-s -o $(ARTIFACTS_DIR)/bootstrap ./functions/execute
	scripts/ship-cache.sh $(ARTIFACTS_DIR)

build-CapabilityFunction: $(GUEST)
	mkdir -p $(ARTIFACTS_DIR)
	$(LAMBDA_GOFLAGS) $(GO) build -tags $(LAMBDA_TAGS) -trimpath -ldflags=-s -o $(ARTIFACTS_DIR)/bootstrap ./functions/capability
	scripts/ship-cache.sh $(ARTIFACTS_DIR)

# The aggregator runs no sandbox: no guest, no shipped cache.
build-AggregateFunction:
	mkdir -p $(ARTIFACTS_DIR)
	$(LAMBDA_GOFLAGS) $(GO) build -tags $(LAMBDA_TAGS) -trimpath -ldflags=-s -o $(ARTIFACTS_DIR)/bootstrap ./functions/aggregate

# The streaming REST API's JWT authorizer (AuthMode=JWT): no sandbox either.
build-AuthorizeFunction:
	mkdir -p $(ARTIFACTS_DIR)
	$(LAMBDA_GOFLAGS) $(GO) build -tags $(LAMBDA_TAGS) -trimpath -ldflags=-s -o $(ARTIFACTS_DIR)/bootstrap ./functions/authorize

## check-artifact: run the built arm64 bootstraps (under qemu-user on other
## hosts) behind the Lambda emulator with an empty cache directory, and check
## that each answered its first request without compiling the guest.
check-artifact:
	PML_ARTIFACTS=$(CURDIR)/dist $(GO) test -count=1 -run TestArtifact -v ./integration/

## guest-reproducible: build the guest twice and compare.
guest-reproducible:
	guest-runtime/build.sh /tmp/pml-guest-a.wasm
	guest-runtime/build.sh /tmp/pml-guest-b.wasm
	cmp /tmp/pml-guest-a.wasm /tmp/pml-guest-b.wasm && echo "guest build is reproducible"

clean:
	rm -rf bin dist $(GUEST)
