# sandboxd — the front door. `make test` is what CI runs.
GO ?= go
BIN ?= bin/sandboxd

# What `sandboxd version` prints on its first line: the nearest tag, else the
# commit, with -dirty for uncommitted changes. -buildvcs=auto (overriding a
# GOFLAGS=-buildvcs=false) also records the full commit and its time.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO_BUILD_FLAGS := -trimpath -buildvcs=auto -ldflags '-X main.stampedVersion=$(VERSION)'

.PHONY: all build install test test-short lint check demo bench

all: build

build:
	$(GO) build $(GO_BUILD_FLAGS) -o $(BIN) ./cmd/sandboxd

# Into $(go env GOBIN), else $(go env GOPATH)/bin.
install:
	$(GO) install $(GO_BUILD_FLAGS) ./cmd/sandboxd

# go vet + every test with the race detector.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

test-short:
	$(GO) test -short -count=1 ./...

lint:
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; else echo "staticcheck not installed: go install honnef.co/go/tools/cmd/staticcheck@latest"; fi

# gofmt clean, go.mod tidy, committed fixtures reproducible; fails on a dirty tree.
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) mod tidy
	@git diff --exit-code go.mod go.sum
	$(MAKE) wasm-check

# The main job on the bundled example handler.
demo:
	$(GO) run ./cmd/sandboxd run

# The side-by-side suite (bench/, its own module: sandboxd, Extism, native
# Go); writes BENCHMARKS.md in about two minutes. Package micro-benchmarks:
# go test -run '^$$' -bench . -benchmem ./...
bench:
	cd bench && $(GO) test -count=1 -run '^TestSuite$$' -timeout 15m . -args -out ../BENCHMARKS.md

include mk/wasm.mk
