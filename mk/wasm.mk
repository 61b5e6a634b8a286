# mk/wasm.mk: rebuild the committed Wasm modules from their sources.
#
# Included from the top Makefile, or run alone from the repository root:
#   make -f mk/wasm.mk wasm         rebuild what is out of date
#   make -f mk/wasm.mk wasm-check   rebuild everything into a temporary
#                                   directory; fail if a committed module
#                                   differs or has no source
#
#   testdata/wasm/wat/NAME.wat        -> testdata/wasm/NAME.wasm   (wat2wasm)
#   testdata/wasm/go/NAME_reactor/    -> testdata/wasm/NAME_reactor.wasm
#                                        (go build -buildmode=c-shared)
#   testdata/wasm/go/NAME_command/    -> testdata/wasm/NAME_command.wasm
#                                        (go build)
#   examples/echo/                    -> examples/echo/handler.wasm (reactor)
#   examples/pack/NAME.wat            -> examples/pack/NAME.wasm   (wat2wasm,
#                                        no name section)
#
# Without wat2wasm (Debian: apt-get install wabt) wasm-check says it skipped
# and exits 0, except under CI=true, where it fails.
#
# Builds are reproducible: wat2wasm is deterministic, and Go builds use
# -trimpath and -buildvcs=false, so the same toolchain (go.mod's) gives the
# same bytes on any machine.

GO ?= go
WAT2WASM ?= wat2wasm

# Where this file lives, for the recursive make of wasm-check.
WASM_MK := $(lastword $(MAKEFILE_LIST))

# The includer's default goal so far (restored at the end of this file).
WASM_DEFAULT_GOAL := $(.DEFAULT_GOAL)

# Prefix of every output path; wasm-check sets it to a temporary directory
# (with a trailing slash).
WASM_OUT ?=

WASM_FIXTURES := testdata/wasm
WAT2WASM_FLAGS := --debug-names
GO_WASM_ENV := GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOWASM= GOFLAGS=
GO_WASM_FLAGS := -trimpath -buildvcs=false -ldflags='-s -w'

# Go sources every Go module depends on (the SDK, the ABI, the module file).
GO_WASM_DEPS := $(filter-out %_test.go,$(wildcard guest-sdk/go/*.go guest-sdk/go/sdkhttp/*.go abi/*.go)) go.mod

WAT_NAMES := $(sort $(basename $(notdir $(wildcard $(WASM_FIXTURES)/wat/*.wat))))
GO_REACTOR_NAMES := $(sort $(notdir $(wildcard $(WASM_FIXTURES)/go/*_reactor)))
GO_COMMAND_NAMES := $(sort $(notdir $(wildcard $(WASM_FIXTURES)/go/*_command)))

WASM_DUPLICATES := $(filter $(WAT_NAMES),$(GO_REACTOR_NAMES) $(GO_COMMAND_NAMES))
ifneq ($(WASM_DUPLICATES),)
$(error mk/wasm.mk: fixtures with both a WAT and a Go source: $(WASM_DUPLICATES))
endif

WAT_WASM := $(WAT_NAMES:%=$(WASM_FIXTURES)/%.wasm)
GO_REACTOR_WASM := $(GO_REACTOR_NAMES:%=$(WASM_FIXTURES)/%.wasm)
GO_COMMAND_WASM := $(GO_COMMAND_NAMES:%=$(WASM_FIXTURES)/%.wasm)
EXAMPLE_WASM := examples/echo/handler.wasm
EXAMPLE_WAT_WASM := $(patsubst %.wat,%.wasm,$(sort $(wildcard examples/pack/*.wat)))

# Every module built from source, as paths relative to the repository root.
WASM_MODULES := $(WAT_WASM) $(GO_REACTOR_WASM) $(GO_COMMAND_WASM) $(EXAMPLE_WASM) $(EXAMPLE_WAT_WASM)

.PHONY: wasm wasm-check

wasm: $(addprefix $(WASM_OUT),$(WASM_MODULES))

$(addprefix $(WASM_OUT),$(WAT_WASM)): $(WASM_OUT)$(WASM_FIXTURES)/%.wasm: $(WASM_FIXTURES)/wat/%.wat
	@mkdir -p $(@D)
	$(WAT2WASM) $(WAT2WASM_FLAGS) -o $@ $<

$(addprefix $(WASM_OUT),$(GO_REACTOR_WASM)): $(WASM_OUT)$(WASM_FIXTURES)/%.wasm: $(WASM_FIXTURES)/go/%/main.go $(GO_WASM_DEPS)
	@mkdir -p $(@D)
	$(GO_WASM_ENV) $(GO) build $(GO_WASM_FLAGS) -buildmode=c-shared -o $@ ./$(WASM_FIXTURES)/go/$*

$(addprefix $(WASM_OUT),$(GO_COMMAND_WASM)): $(WASM_OUT)$(WASM_FIXTURES)/%.wasm: $(WASM_FIXTURES)/go/%/main.go $(GO_WASM_DEPS)
	@mkdir -p $(@D)
	$(GO_WASM_ENV) $(GO) build $(GO_WASM_FLAGS) -o $@ ./$(WASM_FIXTURES)/go/$*

$(addprefix $(WASM_OUT),$(EXAMPLE_WAT_WASM)): $(WASM_OUT)examples/pack/%.wasm: examples/pack/%.wat
	@mkdir -p $(@D)
	$(WAT2WASM) -o $@ $<

$(WASM_OUT)$(EXAMPLE_WASM): examples/echo/main.go $(GO_WASM_DEPS)
	@mkdir -p $(@D)
	$(GO_WASM_ENV) $(GO) build $(GO_WASM_FLAGS) -buildmode=c-shared -o $@ ./examples/echo

wasm-check:
	@if ! command -v $(WAT2WASM) >/dev/null 2>&1; then \
		if [ "$$CI" = true ]; then echo "wasm-check: $(WAT2WASM) is not installed (apt-get install wabt); CI=true requires it"; exit 1; fi; \
		echo "wasm-check: SKIPPED: $(WAT2WASM) is not installed (apt-get install wabt), so the committed modules were not compared with their sources"; exit 0; \
	fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(MAKE) --no-print-directory -f $(WASM_MK) WASM_OUT="$$tmp/" wasm >"$$tmp/build.log" 2>&1 || \
		{ cat "$$tmp/build.log"; echo "wasm-check: rebuilding from source failed"; exit 1; }; \
	status=0; \
	for f in $(WASM_MODULES); do \
		if [ ! -f "$$f" ]; then echo "wasm-check: $$f is missing (run make wasm)"; status=1; \
		elif ! cmp -s "$$f" "$$tmp/$$f"; then echo "wasm-check: $$f differs from a rebuild of its source (run make wasm)"; status=1; fi; \
	done; \
	for f in $(filter-out $(WASM_MODULES),$(wildcard $(WASM_FIXTURES)/*.wasm examples/pack/*.wasm)); do \
		echo "wasm-check: $$f has no source"; status=1; \
	done; \
	[ $$status -eq 0 ] && echo "wasm-check: $(words $(WASM_MODULES)) modules match their sources"; \
	exit $$status

# Included: leave the includer's default goal alone, even when this file is
# included before its first target.
ifneq ($(words $(MAKEFILE_LIST)),1)
.DEFAULT_GOAL := $(WASM_DEFAULT_GOAL)
endif
