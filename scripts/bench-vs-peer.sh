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
# measurements to run) go to both sides.
# Needs /usr/bin/python3 with PyTorch (Debian: apt-get install python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
sizes=(${SIZES:-} ${ONLY:+--only "$ONLY"})
model=()
peer_model=()
if [[ -n "${MODEL:-}" ]]; then
	model=(--model "$MODEL")
	if [[ -f "$MODEL/config.json" ]]; then
		peer_model=(--config "$MODEL/config.json")
	fi
fi
bin=$(mktemp -d)/stx
go build -o "$bin" ./cmd/stx
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log=$(mktemp)
# One stx bench per backend (BACKEND is a space-separated list; empty: the default backend);
# each JSON line is tagged with its backend.
stx=""
for backend in ${BACKEND:-default}; do
	flag=()
	[[ "$backend" == default ]] || flag=(--backend "$backend")
	out=$("$bin" bench --json --runs "$runs" "${flag[@]}" "${model[@]}" "${sizes[@]}" 2>>"$log")
	stx+=$(BACKEND_NAME="$backend" OUT="$out" /usr/bin/python3 -c '
import json, os
for line in os.environ["OUT"].splitlines():
    o = json.loads(line); o["backend"] = os.environ["BACKEND_NAME"]; print(json.dumps(o))')$'\n'
done
peer=$(for threads in "1 1" "2 1" "1 2"; do
	set -- $threads
	/usr/bin/python3 scripts/peer_bench.py --runs "$runs" --threads "$1" --blas-threads "$2" "${peer_model[@]}" "${sizes[@]}" 2>>"$log"
done)
grep -E "^(backend|peer:)" "$log" | sed 's/^/# /'
rm -f "$log"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
STX="$stx" PEER="$peer" /usr/bin/python3 - <<'PY'
import json, os
stx = {}
for o in map(json.loads, filter(None, os.environ["STX"].splitlines())):
    stx.setdefault(o["backend"], {})[o["name"]] = o
peer = {}
for o in map(json.loads, os.environ["PEER"].splitlines()):
    if o["name"] not in peer or o["tokens_per_s"] > peer[o["name"]]["tokens_per_s"]:
        peer[o["name"]] = o
print(f"{'measurement':<20}{'backend':<12}{'stx tok/s':>12}{'peer tok/s':>12}{'stx/peer':>10}  peer threads (PyTorch, OpenBLAS)")
for name, p in peer.items():
    for backend, figures in stx.items():
        s = figures[name]["tokens_per_s"]
        print(f"{name:<20}{backend:<12}{s:>12.1f}{p['tokens_per_s']:>12.1f}{s / p['tokens_per_s']:>9.2f}x  {p['threads']}, {p['blas_threads']}")
PY
echo "load average before: $load_before; after: $load_after ($(nproc) cores)"
