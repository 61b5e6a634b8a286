# sandboxd — the front door. `make test` is what CI runs.
GO ?= go
BIN ?= bin/sandboxd

# What `sandboxd version` prints on its first line: the nearest tag, else the
# commit, with -dirty for uncommitted changes. -buildvcs=auto (overriding a
# GOFLAGS=-buildvcs=false) also records the full commit and its time.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO_BUILD_FLAGS := -trimpath -buildvcs=auto -ldflags '-X main.stampedVersion=$(VERSION)'

.PHONY: all build install test test-deploy test-short lint check demo bench bench-serve image tools

all: build

build:
	$(GO) build $(GO_BUILD_FLAGS) -o $(BIN) ./cmd/sandboxd

# Into $(go env GOBIN), else $(go env GOPATH)/bin.
install:
	$(GO) install $(GO_BUILD_FLAGS) ./cmd/sandboxd

# go vet + every test with the race detector. mk/testsummary prints what go
# test prints, then the skipped tests by reason (a tool that is not installed,
# -short, -race) and "tests: N passed, N failed, N skipped".
test: test-deploy
	$(GO) vet ./...
	$(GO) run ./mk/testsummary -race -count=1 -timeout 30m ./...

# The Kubernetes manifests decode strictly into k8s.io/api types (a separate
# module, deploy/kubernetes/validate, so sandboxd gains no such dependency).
DEPLOY_MOD := deploy/kubernetes/validate
test-deploy:
	cd $(DEPLOY_MOD) && GOFLAGS= $(GO) vet ./... && GOFLAGS= $(GO) test -count=1 ./...

# The local loop: no race detector, and -short skips the multi-MB Go-guest
# compiles, binary builds, fuzz corpora and liveness runs. The slowest
# packages are named first so that go test starts them first: in ./... order
# server came last and ran alone on one of the two cores for its last seconds.
# SHORT_P is go test's -p (test binaries at once): 2, one per CPU here. -p 3
# was 3 s faster idle (37 s vs 40 s) but puts the timing-bounded tests on an
# overcommitted machine; make test-short SHORT_P=3 when the machine is yours.
SHORT_FIRST := ./server/ ./executor/ ./internal/fuel/ ./mcp/ ./artifact/
SHORT_P ?= 2
test-short:
	$(GO) run ./mk/testsummary -short -count=1 -p $(SHORT_P) -timeout 10m $(SHORT_FIRST) ./...

# go vet and staticcheck (required: .ci/deps.d/10-lint.sh pins it) on the
# main module and bench/; staticcheck on deploy/kubernetes/validate too.
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(CURDIR)/.tools/bin/staticcheck)
lint:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	@command -v $(STATICCHECK) >/dev/null 2>&1 || { echo "lint: staticcheck is not installed: make tools"; exit 1; }
	$(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...
	cd $(DEPLOY_MOD) && GOFLAGS= $(STATICCHECK) ./...

# gofmt clean, both modules tidy (go mod tidy -diff changes nothing), the
# committed fixtures reproducible from their sources (wasm-check).
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	cd $(DEPLOY_MOD) && GOFLAGS= $(GO) mod tidy -diff
	$(MAKE) --no-print-directory wasm-check

# The contributor tools the integration suites use, the same pinned versions
# CI installs: every .ci/deps.d/*.sh (staticcheck, oras, crane, the Extism
# PDK examples' packages, the MCP TypeScript SDK) into ./.tools, where the
# tests look for them. Debian's packages (wabt, docker-registry, ...) are the
# apt line in README.md.
TOOLS_DIR ?= $(CURDIR)/.tools
tools:
	@mkdir -p $(TOOLS_DIR)/bin
	SANDBOXD_TOOLS=$(TOOLS_DIR) PATH="$(TOOLS_DIR)/bin:$$PATH" bash -ec 'for f in .ci/deps.d/*.sh; do echo "== $$f"; . "$$f"; done'

# The main job on the bundled example handler.
demo:
	$(GO) run ./cmd/sandboxd run

# The side-by-side suite (bench/, its own module: sandboxd, Extism, native
# Go); writes BENCHMARKS.md in about two minutes. Package micro-benchmarks:
# go test -run '^$$' -bench . -benchmem ./...
bench:
	cd bench && $(GO) test -count=1 -run '^TestSuite$$' -timeout 15m . -args -out ../BENCHMARKS.md

# serve under an external load generator (issue 26): wrk against
# `sandboxd serve` (POST /v1/invoke, 1 KiB validated echo) and against a
# minimal net/http server decoding and encoding the same frame (bench/cmd/benchserve
# floor, its own process), interleaved rounds; prints calls/s, p50, p99 at
# c=8 and c=64, the ratios and the goals. Needs wrk (Debian: apt-get install wrk).
# BENCH_SERVE_ARGS passes flags, e.g. -rounds 5 -d 5s, or -cpuprofile serve.pprof
# (the serve side in-process, profiled).
BENCH_SERVE_ARGS ?=
bench-serve: build
	cd bench && $(GO) build -o ../bin/benchserve ./cmd/benchserve
	bin/benchserve -sandboxd $(BIN) -module testdata/wasm/echo_reactor.wasm $(BENCH_SERVE_ARGS)

# The container image, without a container daemon (deploy/image): a static
# linux binary on an empty base, user 65532, no shell, written as an OCI
# image layout to IMAGE_DIR; IMAGE_PUSH=registry/repo:tag also pushes it.
# The same commit gives the same digest (file times are the commit's time).
IMAGE_DIR ?= bin/image
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
IMAGE_PUSH ?=
IMAGE_CREATED := $(shell git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)
IMAGE_REVISION := $(shell git rev-parse HEAD 2>/dev/null)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build $(GO_BUILD_FLAGS) -o bin/linux-$(IMAGE_ARCH)/sandboxd ./cmd/sandboxd
	$(GO) run ./deploy/image --binary bin/linux-$(IMAGE_ARCH)/sandboxd --arch $(IMAGE_ARCH) --version $(VERSION) \
		--revision "$(IMAGE_REVISION)" --created "$(IMAGE_CREATED)" --out $(IMAGE_DIR) $(if $(IMAGE_PUSH),--push $(IMAGE_PUSH))

include mk/wasm.mk
