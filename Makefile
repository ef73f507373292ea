# stx — the commands the README documents. `make test` is what CI runs.
GO ?= go
STX := ./stx

.PHONY: all build test vet fmt-check demo bench clean

all: build

build:
	$(GO) build -o $(STX) ./cmd/stx

# test: formatting, vet and every test of the module.
test: fmt-check vet
	$(GO) test -count=1 ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# demo: the main job on built-in defaults (no downloads, CPU only).
demo: build
	$(STX) vet
	$(STX) ls
	$(STX) graph -a ppo
	$(STX) export -a grpo --format yaml

# bench: benchmarks of the Go packages (speed is measured here, never in tests).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 5x ./schema/... ./engine/... ./estimators/...

clean:
	rm -f $(STX)
