#!/usr/bin/env bash
# Runs `stx bench` and its PyTorch CPU peer (scripts/peer_bench.py) back to back on this machine
# and prints stx's figures as ratios to the peer's, measured in the same run. The peer runs with
# 1 and 2 PyTorch threads (OpenBLAS on one) and with OpenBLAS's own 2 threads (PyTorch on one),
# and keeps its best figure of each measurement. Both sides load the same OpenBLAS with the
# same environment (OPENBLAS_CORETYPE picks its kernels: e.g. SKYLAKEX for the AVX-512 ones);
# the GEMM line of each is printed. The load average before and after is printed too: on a
# shared machine the ratios are only comparable between runs at similar load.
#   scripts/bench-vs-peer.sh                 # default backend, 5 runs each, the "bench" model
#   BACKEND=go RUNS=3 scripts/bench-vs-peer.sh
#   BACKEND="cpu xla:cpu" scripts/bench-vs-peer.sh   # several backends, each against the same peer
#   MODEL=/tmp/qwen2 SIZES="--batch 1 --seq-len 256 --new-tokens 32" scripts/bench-vs-peer.sh
#   ONLY=forward_logprobs,kv_cache_sampling MODEL=/tmp/qwen2 scripts/bench-vs-peer.sh
# MODEL is a model directory with a config.json (e.g. written by `stx init-model`; the peer
# builds the same shape from it with its own random weights); SIZES and ONLY (the
# measurements to run) go to both sides, and so do DTYPE (float32 or bfloat16: --dtype) and a
# `--lora R` in SIZES (the peer then needs PEFT: scripts/fetch-peft.sh's directory is put on
# PYTHONPATH when it is there).
#
# Comparing builds (before/after a change) against the same peer in one run:
#   STX_BIN="old=/tmp/stx-old new=/tmp/stx-new" ROUNDS=2 SPLIT=1 PEER_THREADS="2,1" \
#     MODEL=/tmp/qwen2 SIZES="--batch 8 --prompt-len 16 --new-tokens 32" ONLY=kv_cache_sampling \
#     scripts/bench-vs-peer.sh
# STX_BIN: space-separated LABEL=PATH (or PATH, labelled by its file name) of prebuilt stx
#   binaries; unset, ./cmd/stx is built into a temporary directory and labelled "stx".
# ROUNDS: each round runs every binary in turn (old new old new ...), so a change in the load
#   hits both; the table keeps each side's best round and lists every round's figure.
# PEER_ROUNDS: in how many of the rounds the peer runs too (default 1: the first).
# PEER_THREADS: the (PyTorch, OpenBLAS) thread pairs the peer tries (default "1,1 2,1 1,2");
#   PEER=0 skips the peer.
# SPLIT=1: one process per measurement (each side), so that each line's peak RSS is its own and
#   not the largest of the measurements run before it in the same process.
# LOG=FILE: every JSON line, tagged with its side, backend and round, is appended to FILE as it
#   arrives (the figures survive a run that is stopped part-way).
# Needs /usr/bin/python3 with PyTorch (Debian: apt-get install python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
rounds=${ROUNDS:-1}
peer_rounds=${PEER_ROUNDS:-1}
py=/usr/bin/python3
sizes=(${SIZES:-} ${DTYPE:+--dtype "$DTYPE"})
model=()
peer_model=()
if [[ -n "${MODEL:-}" ]]; then
	model=(--model "$MODEL")
	if [[ -f "$MODEL/config.json" ]]; then
		peer_model=(--config "$MODEL/config.json")
	fi
fi
if [[ " ${sizes[*]} " == *" --lora "* ]] && ! "$py" -c 'import peft' 2>/dev/null; then
	peft_dir=${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}/pyref/peft
	if [[ -d "$peft_dir" ]]; then
		export PYTHONPATH="$peft_dir${PYTHONPATH:+:$PYTHONPATH}"
	fi
fi
labels=()
bins=()
if [[ -n "${STX_BIN:-}" ]]; then
	for entry in $STX_BIN; do
		if [[ "$entry" == *=* ]]; then
			labels+=("${entry%%=*}")
			bins+=("${entry#*=}")
		else
			labels+=("$(basename "$entry")")
			bins+=("$entry")
		fi
		[[ -x "${bins[-1]}" ]] || { echo "bench-vs-peer: STX_BIN: ${bins[-1]} is not an executable" >&2; exit 2; }
	done
else
	labels=(stx)
	bins=("$(mktemp -d)/stx")
	go build -o "${bins[0]}" ./cmd/stx
fi
# SPLIT=1 runs each measurement in its own processes; otherwise one process runs them all.
groups=("${ONLY:-}")
if [[ "${SPLIT:-0}" == 1 ]]; then
	IFS=, read -r -a groups <<<"${ONLY:-forward_logprobs,grpo_train_step,sft_train_step,kv_cache_sampling}"
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log=$(mktemp)
all=$(mktemp)
trap 'rm -f "$log" "$all"' EXIT
# tag SIDE BACKEND ROUND: reads JSON lines on stdin, adds the tags, appends them to $all (and
# $LOG) and prints a progress line per figure on stderr.
tag() {
	SIDE="$1" BACKEND_NAME="$2" ROUND="$3" "$py" -c '
import json, os, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    o = json.loads(line)
    o.update(side=os.environ["SIDE"], backend=os.environ["BACKEND_NAME"], round=int(os.environ["ROUND"]))
    print(json.dumps(o), flush=True)
    side, backend, rnd, name = o["side"], o["backend"], o["round"], o["name"]
    rate, gib = o["tokens_per_s"], o.get("peak_rss_mib", 0) / 1024
    print(f"# {side} {backend} round {rnd}: {name} {rate:.2f} tok/s, peak RSS {gib:.2f} GiB",
          file=sys.stderr, flush=True)' |
		tee -a "$all" ${LOG:+"$LOG"} >/dev/null
}
# failed WHAT: a side that exits non-zero (e.g. killed for memory) is reported with the end of
# its error output, and the run goes on with the others.
failed() {
	echo "bench-vs-peer: $1 failed; its last error lines:" >&2
	tail -n 5 "$log" | sed 's/^/  /' >&2
}
for group in "${groups[@]}"; do
	only=(${group:+--only "$group"})
	for ((round = 1; round <= rounds; round++)); do
		for i in "${!bins[@]}"; do
			# One stx bench per backend (BACKEND is a space-separated list; empty: the default).
			for backend in ${BACKEND:-default}; do
				flag=()
				[[ "$backend" == default ]] || flag=(--backend "$backend")
				"${bins[$i]}" bench --json --runs "$runs" "${flag[@]}" "${model[@]}" "${sizes[@]}" "${only[@]}" 2>>"$log" |
					tag "${labels[$i]}" "$backend" "$round" || failed "${labels[$i]} ($backend) ${group:-all}"
			done
		done
		if [[ "${PEER:-1}" != 0 ]] && ((round <= peer_rounds)); then
			for threads in ${PEER_THREADS:-1,1 2,1 1,2}; do
				"$py" scripts/peer_bench.py --runs "$runs" --threads "${threads%,*}" --blas-threads "${threads#*,}" \
					"${peer_model[@]}" "${sizes[@]}" "${only[@]}" 2>>"$log" | tag peer peer "$round" ||
					failed "peer ($threads threads) ${group:-all}"
			done
		fi
	done
done
grep -E "^(backend|peer:)" "$log" | sort -u | sed 's/^/# /'
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
LABELS="${labels[*]}" "$py" - "$all" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
labels = __import__("os").environ["LABELS"].split()
best, every = {}, {}
for o in rows:
    key = (o["name"], o["side"], o["backend"])
    every.setdefault(key, []).append(o)
    if key not in best or o["tokens_per_s"] > best[key]["tokens_per_s"]:
        best[key] = o
names = list(dict.fromkeys(o["name"] for o in rows))
backends = list(dict.fromkeys(o["backend"] for o in rows if o["side"] != "peer"))
print(f"{'measurement':<20}{'side':<10}{'backend':<10}{'tok/s':>10}{'peak GiB':>10}{'/peer':>8}  every round (tok/s)")
for name in names:
    peer = best.get((name, "peer", "peer"))
    sides = [(l, b) for l in labels for b in backends] + ([("peer", "peer")] if peer else [])
    for side, backend in sides:
        o = best.get((name, side, backend))
        if o is None:
            continue
        ratio = f"{o['tokens_per_s'] / peer['tokens_per_s']:7.2f}x" if peer and side != "peer" else ""
        if side == "peer":
            rounds = ", ".join(f"{p['tokens_per_s']:.2f} ({p['threads']},{p['blas_threads']})" for p in every[(name, side, backend)])
        else:
            rounds = ", ".join(f"{p['tokens_per_s']:.2f}" for p in every[(name, side, backend)])
        print(f"{name:<20}{side:<10}{backend:<10}{o['tokens_per_s']:>10.2f}{o.get('peak_rss_mib', 0) / 1024:>10.2f}{ratio:>8}  {rounds}")
    # Each build against the first (the "before" when STX_BIN lists old first).
    for backend in backends:
        base = best.get((name, labels[0], backend))
        for side in labels[1:]:
            o = best.get((name, side, backend))
            if base and o:
                print(f"{name:<20}{side + '/' + labels[0]:<20}{o['tokens_per_s'] / base['tokens_per_s']:>10.2f}x  ({backend})")
PY
echo "load average before: $load_before; after: $load_after ($(nproc) cores)"
