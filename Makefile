# sandboxd — the front door. `make test` is what CI runs.
GO ?= go
BIN ?= bin/sandboxd

.PHONY: all build test test-short lint check demo bench

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/sandboxd

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
