# stx — the commands the README documents. `make test` is what CI runs.
GO ?= go
STX := ./stx

.PHONY: all build test test-xla vet fmt-check fuzz demo bench clean gpu-bundle

all: build

build:
	$(GO) build -o $(STX) ./cmd/stx

# test: formatting, vet and every test of the module on the default backend (stx's cpu backend
# where OpenBLAS is installed, else SimpleGo); then the packages that compute again on SimpleGo
# and on XLA (test-xla); then the builds without OpenBLAS (-tags noopenblas: the cpu backend's Go
# GEMM) and without cgo.
# DEFAULT_BACKEND_ONLY are tests the second and third backends skip: what they run is the same
# orchestration on every backend (rollouts from servers, async rollouts) or repeats over the whole
# catalog what per-backend tests already check (LoRA on every family: the LoRA resume and
# reference tests run on every backend), or a large-vocabulary loss whose exact and top-k forms
# the engine's GKD tests also run there.
DEFAULT_BACKEND_ONLY = TestLoRAEveryFamilyRuns|TestRemoteRolloutsEqualInProcess|TestAsyncRollouts|TestAsyncResume|TestGKDTeacherTopK$$
test: fmt-check vet
	$(GO) test -count=1 ./...
	cd third_party/ardanlabs-jinja && $(GO) test -count=1 ./...
	GOMLX_BACKEND=go $(GO) test -count=1 -skip '$(DEFAULT_BACKEND_ONLY)' ./runtime/... ./specializations/... ./engine/... ./cmd/... ./serve/...
	$(MAKE) test-xla
	$(GO) vet -tags noopenblas ./runtime/...
	$(GO) test -count=1 -tags noopenblas ./runtime/ ./runtime/cpu/...
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/stx
	$(MAKE) fuzz

# test-xla: the tests of the xla backend on XLA's CPU PJRT plugins (scripts/fetch-pjrt.sh puts
# them in PJRT_DIR). The first pass already compared XLA with the cpu backend on both plugins
# (log-probs, losses, gradients, bf16 weights, sampled tokens) and ran placement_xla.txtar. Here,
# on the default plugin (PJRT 0.115, through stx's compatibility wrapper): the specializations
# and the engine (every catalog recipe, resume, hot reload, ...) and runtime's multi-device and
# sampler tests; on the older xla-cpu-pjrt (PJRT 0.81), one recipe of each family. Most of the
# time is XLA compiling graphs (about 2 s a train step). Without the plugins this skips, except
# under CI=true, where it fails.
PJRT_DIR ?= $(or $(STX_PJRT_DIR),$(if $(STX_CACHE_DIR),$(STX_CACHE_DIR)/pjrt,$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/stx/pjrt))
PJRT_OLD = $(PJRT_DIR)/xla-cpu-pjrt-0.0.1/pjrt_c_api_cpu_plugin.so
XLA_RUNTIME_TESTS = TestDataParallel|TestEvaluatorOnDevices|TestRolloutCopyFollowsTraining|TestOffloadAndWake|TestSampler|TestRope|TestXLADevices
XLA_OLD_RECIPES = TestEveryCatalogRecipeRuns/^(sft|grpo|ppo|dpo|opd|flow_grpo)$$
test-xla:
	@if [ ! -e "$(PJRT_DIR)/pjrt_c_api_cpu_plugin.so" ] || [ ! -e "$(PJRT_OLD)" ]; then \
		if [ "$$CI" = true ]; then echo "test-xla: no XLA CPU plugins in $(PJRT_DIR): run scripts/fetch-pjrt.sh" >&2; exit 1; fi; \
		echo "test-xla: skipped, no XLA CPU plugins in $(PJRT_DIR) (scripts/fetch-pjrt.sh fetches them)"; exit 0; \
	fi; \
	set -ex; \
	export STX_PJRT_DIR="$(PJRT_DIR)"; \
	GOMLX_BACKEND=xla:cpu $(GO) test -count=1 -timeout 30m -skip '$(DEFAULT_BACKEND_ONLY)' ./specializations/... ./engine/...; \
	GOMLX_BACKEND=xla:cpu $(GO) test -count=1 -timeout 30m -run '$(XLA_RUNTIME_TESTS)' ./runtime/; \
	GOMLX_BACKEND=xla:$(PJRT_OLD) $(GO) test -count=1 -timeout 30m -run '$(XLA_OLD_RECIPES)' ./engine/

# fuzz: each fuzz test of the readers of users' files for a bounded number of inputs (about 8 s
# each here); what a run finds is kept under the package's testdata/fuzz/<FuzzX>/ and replayed by
# every later `go test` as a regression case. Counts, not durations: with a duration, Go 1.26's
# fuzz coordinator can fail a clean run with "context deadline exceeded" as the time runs out
# (golang/go#75804, fixed in Go 1.27).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 300x ./schema
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 200000x ./runtime/safetensors
	$(GO) test -run '^$$' -fuzz '^FuzzReadFile$$' -fuzztime 6000x ./runtime/safetensors
	$(GO) test -run '^$$' -fuzz '^FuzzLoadJSONL$$' -fuzztime 6000x ./engine/tasks
	$(GO) test -run '^$$' -fuzz '^FuzzRender$$' -fuzztime 20000x ./runtime/chat
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 20000x ./runtime/tokenizer
	$(GO) test -run '^$$' -fuzz '^FuzzMathEqual$$' -fuzztime 3000x ./engine/tasks

# vet and fmt-check cover the vendored, patched modules of third_party/ too (./... of the root
# module skips nested modules).
vet:
	$(GO) vet ./...
	cd third_party/ardanlabs-jinja && $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# demo: the README's first command, on built-in defaults (no downloads, CPU only): SFT of
# the tiny model on the arithmetic task, then GRPO from the SFT checkpoint. Each run prints
# its greedy validation accuracy before and after training. The task is 1-digit addition
# (task_digits, task_ops): its 100 sums split into 80 for training and 20 held out. 150 SFT
# steps leave the policy middling (0 -> 0.45 at the default seed on the cpu backend) so that
# GRPO's groups see both right and wrong answers; 40 GRPO rollouts then raise it (0.45 -> 1.0).
# About 10 s on 2 cores with OpenBLAS, 20 s on SimpleGo; 2-digit operands (DEMO_DIGITS=2,
# with larger splits) learn far slower.
DEMO_DIR ?= runs/demo
DEMO_DIGITS ?= 1
DEMO_OPS ?= +
DEMO_COMMON = --set 'task.name="arithmetic"' --set knobs.task_digits=$(DEMO_DIGITS) \
	--set 'knobs.task_ops="$(DEMO_OPS)"' --set task.train_size=80 --set task.validation_size=20 \
	--set knobs.max_new_tokens=4 --set knobs.save_every=0
DEMO_SFT ?= --set knobs.num_rollout=150 --set knobs.rollout_batch_size=16 \
	--set knobs.micro_batch_size=16 --set knobs.lr=3e-3 --set 'knobs.lr_schedule="constant"' \
	--set knobs.warmup_ratio=0 --set knobs.eval_every=50
DEMO_GRPO ?= --set knobs.num_rollout=40 --set knobs.rollout_batch_size=8 \
	--set knobs.n_samples_per_prompt=8 --set knobs.lr=2e-4 --set knobs.eval_every=10
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

# gpu-bundle: the stx binary for scripts/gpu-check.sh on a GPU machine without Go (docs/gpu.md):
# dist/stx (cgo, with the xla backend; stripped, so that it travels in 64 MiB) and dist/stx.rev,
# the source revision it was built from.
gpu-bundle:
	$(GO) build -ldflags="-s -w" -o dist/stx ./cmd/stx
	@git describe --always --dirty > dist/stx.rev 2>/dev/null || echo unknown > dist/stx.rev
	@echo "built dist/stx ($$(cat dist/stx.rev)). Copy the repository with dist/ to the GPU machine and run there:"
	@echo "    scripts/gpu-check.sh OUT_DIR      # report: OUT_DIR/report.txt and OUT_DIR/report.json; exit 0 if all passed"
	@echo "Dry run here on XLA's CPU plugin (scripts/fetch-pjrt.sh installs it):"
	@echo "    QUICK=1 PLUGIN=\$$HOME/.cache/stx/pjrt/pjrt_c_api_cpu_plugin.so scripts/gpu-check.sh /tmp/gpu-check"
