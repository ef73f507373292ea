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

# demo: the README's first command, on built-in defaults (no downloads, CPU only): SFT of
# the tiny model, then GRPO from the SFT checkpoint. Each run prints its validation
# accuracy before and after training (greedy, the first 64 validation prompts). The task
# is sorting: in the demo's budget the tiny model learns it (accuracy 0 -> ~0.77 after
# SFT), while 2-digit arithmetic stays near 0 after 500 SFT steps of 64 examples; run
# `make demo DEMO_TASK=arithmetic` to see that.
DEMO_DIR ?= runs/demo
DEMO_TASK ?= sorting
DEMO_COMMON = --set 'task.name="$(DEMO_TASK)"' --set knobs.max_new_tokens=16 --set knobs.save_every=0
DEMO_SFT ?= --set knobs.num_rollout=150 --set knobs.rollout_batch_size=64 \
	--set knobs.micro_batch_size=64 --set knobs.lr=3e-3 --set knobs.eval_every=50
DEMO_GRPO ?= --set knobs.num_rollout=30 --set knobs.rollout_batch_size=16 --set knobs.lr=1e-4 \
	--set knobs.eval_every=10
demo: build
	$(STX) vet
	@set -e; \
	out=$$($(STX) run recipes.cue -a sft --runs-dir $(DEMO_DIR) --quiet $(DEMO_COMMON) $(DEMO_SFT)); \
	echo "$$out"; \
	dir=$${out##*run directory }; \
	ckpt=$$(ls -d "$$dir"/checkpoints/[0-9]* | tail -n 1)/policy; \
	echo "GRPO from $$ckpt"; \
	$(STX) run recipes.cue -a grpo --runs-dir $(DEMO_DIR) --quiet \
		--set "roles.actor.model.source=\"$$ckpt\"" $(DEMO_COMMON) $(DEMO_GRPO)

# bench: benchmarks of the Go packages (speed is measured here, never in tests).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 5x ./schema/... ./engine/... ./estimators/...

clean:
	rm -f $(STX)
