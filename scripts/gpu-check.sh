#!/usr/bin/env bash
# gpu-check.sh runs stx on a GPU through XLA's CUDA PJRT plugin and writes a report: the
# plugin's PJRT version, the tiny GRPO recipe's validation accuracy before → after, and
# `stx bench` speed and MFU on a Qwen2.5-0.5B-shaped model and the built-in "bench" model.
#
# Made for a machine without Go or network (stx is built elsewhere: `make gpu-bundle`) that has
# Python 3 with jax-cuda13-pjrt / jax-cuda13-plugin and NVIDIA's cu13 wheels: the plugin
# (site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so) and the NVIDIA libraries
# (site-packages/nvidia/*/lib) are found with python3. Every step has its own timeout and the
# whole check a deadline (TOTAL_S, 450 s); a failed step is recorded and the next one runs.
#
# Usage: scripts/gpu-check.sh OUT_DIR
#
# Writes OUT_DIR/report.json, OUT_DIR/report.txt (printed at the end) and OUT_DIR/logs/;
# runs under OUT_DIR/runs, STX_CACHE_DIR=OUT_DIR/cache, the random model in OUT_DIR/qwen0.5b
# (its 1 GB of weights are deleted at the end unless KEEP_MODEL=1). Exit 0 if every step passed.
#
# Environment:
#   STX=dist/stx          the stx binary (relative paths: from the repository root)
#   PLUGIN=/abs/plugin.so a PJRT plugin instead of the one python3 finds (e.g. XLA's CPU plugin
#                         for a dry run without a GPU); the NVIDIA search is then optional
#   QUICK=1               small sizes, for a dry run on a CPU plugin (a few minutes)
#   XLA_OPTS=,tf32        appended to the backend spec xla:$PLUGIN (stx's xla options)
#   GRPO_ROLLOUTS=10      knobs.num_rollout of the GRPO run
#   QWEN_BENCH_ARGS       sizes of the Qwen bench (default --batch 8 --seq-len 512
#                         --prompt-len 64 --new-tokens 64 --runs 3)
#   QWEN_MEASUREMENTS     which Qwen measurements to run, one stx process each (default all four;
#                         QUICK: forward_logprobs kv_cache_sampling)
#   BENCH_ARGS            sizes of the built-in bench model (default: stx bench's own)
#   PEAK_TFLOPS=989       the H200's dense BF16 peak (TFLOP/s)
#   PEAK_TF32_TFLOPS=494  its dense TF32 tensor-core peak; PEAK_FP32_TFLOPS=67, its FP32 peak
#   MFU_PRECISION         the peak MFU is computed against: bf16, tf32 or fp32 (default: what
#                         stx's graphs use, see "compute precision" below)
#   TOTAL_S=450           deadline of the whole check in seconds (steps get what is left)
set -uo pipefail

die() {
	echo "gpu-check: $*" >&2
	exit 1
}

[ $# -eq 1 ] || die "usage: scripts/gpu-check.sh OUT_DIR"
command -v python3 >/dev/null || die "python3 is needed (plugin search and the JSON report)"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$1" || die "cannot create $1"
out=$(cd "$1" && pwd)
cd "$repo" || die "cannot enter $repo"
# A new check starts from nothing: no logs, report, runs, cache or model of an earlier one
# (the tiny-sft starting model is built again, on the backend under test).
rm -rf "$out/logs" "$out/runs" "$out/cache" "$out/qwen0.5b" "$out/report.json" "$out/report.txt" "$out/steps.tsv" "$out/meta.env"
mkdir -p "$out/logs"

STX=${STX:-dist/stx}
case "$STX" in /*) ;; *) STX="$repo/$STX" ;; esac
QUICK=${QUICK:-0}
XLA_OPTS=${XLA_OPTS:-}
GRPO_ROLLOUTS=${GRPO_ROLLOUTS:-10}
TOTAL_S=${TOTAL_S:-450}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
PEAK_TF32_TFLOPS=${PEAK_TF32_TFLOPS:-494}
PEAK_FP32_TFLOPS=${PEAK_FP32_TFLOPS:-67}
if [ "$QUICK" = 1 ]; then
	QWEN_BENCH_ARGS=${QWEN_BENCH_ARGS:---batch 1 --seq-len 32 --prompt-len 8 --new-tokens 4 --runs 1}
	# The train steps of a 0.5B model on XLA's CPU plugin need 17 GiB and more: not a dry run.
	QWEN_MEASUREMENTS=${QWEN_MEASUREMENTS:-forward_logprobs kv_cache_sampling}
	BENCH_ARGS=${BENCH_ARGS:---batch 2 --seq-len 64 --prompt-len 8 --new-tokens 8 --runs 1}
else
	QWEN_BENCH_ARGS=${QWEN_BENCH_ARGS:---batch 8 --seq-len 512 --prompt-len 64 --new-tokens 64 --runs 3}
	QWEN_MEASUREMENTS=${QWEN_MEASUREMENTS:-forward_logprobs grpo_train_step sft_train_step kv_cache_sampling}
	BENCH_ARGS=${BENCH_ARGS:---runs 3}
fi
read -r -a qwen_args <<<"$QWEN_BENCH_ARGS"
read -r -a bench_args <<<"$BENCH_ARGS"

start=$(date +%s)
steps="$out/steps.tsv" # name, status, exit code, seconds, timeout, note
meta="$out/meta.env"   # key=value facts for the report
: >"$steps"
: >"$meta"
failed=0

# note VALUE: one line, no tabs, at most 300 characters.
oneline() { tr '\t\r\n' '   ' | sed 's/  */ /g; s/^ //; s/ $//' | cut -c1-300; }
record() { # name status rc seconds limit note
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$(printf '%s' "$6" | oneline)" >>"$steps"
	case "$2" in pass | skipped) ;; *) failed=1 ;; esac
	printf 'gpu-check: %-28s %-8s %6ss  %s\n' "$1" "$2" "$4" "$(printf '%s' "$6" | oneline | cut -c1-120)"
}
setmeta() { printf '%s=%s\n' "$1" "$(printf '%s' "$2" | oneline)" >>"$meta"; }
remaining() { echo $((TOTAL_S - ($(date +%s) - start))); }

# step NAME LIMIT CMD...: runs CMD with stdout and stderr in logs/NAME.{out,err} under
# timeout min(LIMIT, time left); records pass, fail (exit code) or timeout. Returns CMD's status.
step() {
	local name=$1 limit=$2 left t0 t1 rc secs status note
	shift 2
	left=$(($(remaining) - 5))
	if [ "$left" -lt 10 ]; then
		record "$name" not_run - 0 0 "no time left before the ${TOTAL_S}s deadline"
		return 1
	fi
	[ "$limit" -le "$left" ] || limit=$left
	printf 'gpu-check: %-28s running (timeout %ss)\n' "$name" "$limit"
	t0=$(date +%s.%N)
	timeout --kill-after=5 "$limit" "$@" >"$out/logs/$name.out" 2>"$out/logs/$name.err"
	rc=$?
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	case $rc in
	0) status=pass note="" ;;
	124 | 137) status=timeout note="killed after ${limit}s" ;;
	*) status=fail note="exit $rc: $(grep -v '^[[:space:]]*$' "$out/logs/$name.err" | tail -n 3)" ;;
	esac
	record "$name" "$status" "$rc" "$secs" "$limit" "$note"
	return "$rc"
}

setmeta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
setmeta host "$(hostname 2>/dev/null || echo unknown)"
setmeta quick "$QUICK"
setmeta glibc "$(ldd --version 2>/dev/null | head -n 1)"

# 1. Environment: stx, the plugin, the NVIDIA libraries, the GPU.
if [ -f "$STX" ] && [ ! -x "$STX" ]; then chmod +x "$STX" 2>/dev/null; fi
if [ -x "$STX" ]; then
	setmeta stx_path "$STX"
	setmeta stx_version "$("$STX" --version 2>&1 | head -n 1)"
	setmeta stx_revision "$(cat "$(dirname "$STX")/stx.rev" 2>/dev/null || echo unknown)"
	record stx_binary pass 0 0 0 "$STX"
else
	record stx_binary fail - 0 0 "no executable stx at $STX (make gpu-bundle builds dist/stx; or set STX)"
fi

t0=$(date +%s)
find_out=$(timeout 30 python3 - <<'EOF' 2>"$out/logs/find_plugin.err"
import glob, importlib.metadata, os, site, sys, sysconfig

roots = []
def add(p):
    if p and os.path.isdir(p) and os.path.realpath(p) not in map(os.path.realpath, roots):
        roots.append(p)
paths = sysconfig.get_paths()
add(paths.get("purelib")); add(paths.get("platlib"))
try:
    for p in site.getsitepackages(): add(p)
except Exception:
    pass
for p in sys.path: add(p)

plugin = ""
for pattern in ("jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins/xla_cuda*/xla_cuda_plugin.so"):
    for r in roots:
        found = sorted(glob.glob(os.path.join(r, pattern)), reverse=True)
        if found:
            plugin = os.path.abspath(found[0]); break
    if plugin: break

# The nvidia/ folder beside the plugin's jax_plugins/ first, else the first on the path.
nvidia = ""
cands = ([os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(plugin))), "nvidia")] if plugin else []) + \
        [os.path.join(r, "nvidia") for r in roots]
for c in cands:
    if os.path.isdir(c) and glob.glob(os.path.join(c, "*", "lib")):
        nvidia = os.path.abspath(c); break

libs, data = [], ""
if nvidia:
    libs = sorted(d for d in glob.glob(os.path.join(nvidia, "*", "lib")) if os.path.isdir(d))
    # XLA's CUDA data dir holds bin/ptxas and nvvm/libdevice: cuda_nvcc (CUDA 12 wheels),
    # cu13 (CUDA 13 wheels) or whichever has them.
    dirs = [os.path.join(nvidia, "cuda_nvcc")] + sorted(glob.glob(os.path.join(nvidia, "*"))) + [nvidia]
    has = lambda d, x: os.path.exists(os.path.join(d, x))
    for want in (lambda d: has(d, "bin/ptxas") and has(d, "nvvm"), lambda d: has(d, "bin/ptxas") or has(d, "nvvm")):
        data = next((d for d in dirs if os.path.isdir(d) and want(d)), "")
        if data: break

pkgs = []
for p in ("jax", "jaxlib", "jax-cuda13-pjrt", "jax-cuda13-plugin", "nvidia-cuda-nvcc", "nvidia-cublas"):
    try:
        pkgs.append(f"{p} {importlib.metadata.version(p)}")
    except Exception:
        pass
print("py_plugin=" + plugin)
print("py_nvidia=" + nvidia)
print("py_libs=" + ":".join(libs))
print("py_data=" + data)
print("py_python=" + sys.version.split()[0] + " " + sys.executable)
print("py_packages=" + ", ".join(pkgs))
EOF
)
find_rc=$?
py_plugin="" py_nvidia="" py_libs="" py_data="" py_python="" py_packages=""
while IFS='=' read -r key val; do
	case "$key" in
	py_plugin | py_nvidia | py_libs | py_data | py_python | py_packages) printf -v "$key" '%s' "$val" ;;
	esac
done <<<"$find_out"
setmeta python "$py_python"
setmeta python_packages "$py_packages"
if [ -n "${PLUGIN:-}" ]; then
	plugin_source="PLUGIN"
	case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
else
	plugin_source="python3 search"
	PLUGIN=$py_plugin
fi
note="plugin ($plugin_source): ${PLUGIN:-none}; nvidia: ${py_nvidia:-none}"
if [ -n "$py_nvidia" ]; then
	export LD_LIBRARY_PATH="$py_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	if [ -n "$py_data" ]; then
		export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_cuda_data_dir=$py_data"
	else
		note="$note; no CUDA data dir (bin/ptxas, nvvm) under it"
	fi
fi
export GOPJRT_CUDA_CHECKS=0 GOMLX_NO_AUTO_INSTALL=1 STX_CACHE_DIR="$out/cache"
setmeta plugin "$PLUGIN"
setmeta plugin_source "$plugin_source"
setmeta nvidia_dir "$py_nvidia"
setmeta cuda_data_dir "$py_data"
setmeta LD_LIBRARY_PATH "${LD_LIBRARY_PATH:-}"
setmeta XLA_FLAGS "${XLA_FLAGS:-}"
setmeta STX_CACHE_DIR "$STX_CACHE_DIR"
if [ "$find_rc" -ne 0 ]; then
	record find_plugin fail "$find_rc" $(($(date +%s) - t0)) 30 "python3 search failed: $(tail -n 2 "$out/logs/find_plugin.err")"
elif [ -z "$PLUGIN" ] || [ ! -f "$PLUGIN" ]; then
	record find_plugin fail 1 $(($(date +%s) - t0)) 30 "no PJRT plugin (${PLUGIN:-none found under site-packages jax_plugins/xla_cuda*/}); set PLUGIN=/abs/path.so"
elif [ -z "$py_nvidia" ] && [ "$plugin_source" != PLUGIN ]; then
	record find_plugin fail 1 $(($(date +%s) - t0)) 30 "$note: the CUDA plugin needs the NVIDIA wheels' libraries"
else
	record find_plugin pass 0 $(($(date +%s) - t0)) 30 "$note"
fi

shopt -s nullglob
devs=(/dev/nvidia[0-9]*)
shopt -u nullglob
gpus=${#devs[@]}
setmeta dev_nvidia "$gpus"
if command -v nvidia-smi >/dev/null; then
	if smi=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1); then
		IFS=',' read -r gpu_name gpu_driver gpu_mem gpu_cc <<<"$(head -n 1 <<<"$smi")"
		setmeta gpu_name "$gpu_name"
		setmeta gpu_driver "$gpu_driver"
		setmeta gpu_memory "$gpu_mem"
		setmeta gpu_compute_cap "$gpu_cc"
		setmeta gpu_count "$(wc -l <<<"$smi")"
		record nvidia_smi pass 0 0 30 "$(head -n 1 <<<"$smi")"
	else
		record nvidia_smi fail 1 0 30 "nvidia-smi: $smi"
	fi
else
	setmeta gpu_name "none (nvidia-smi not found)"
	record nvidia_smi skipped - 0 0 "nvidia-smi not found (${gpus} /dev/nvidiaN devices)"
fi

ready=1
[ -x "$STX" ] && [ -n "$PLUGIN" ] && [ -f "$PLUGIN" ] || ready=0
backend="xla:$PLUGIN$XLA_OPTS"
setmeta backend_spec "$backend"

# run_stx NAME LIMIT ARGS...: step NAME running stx, or not_run without stx or a plugin.
run_stx() {
	local name=$1 limit=$2
	shift 2
	if [ "$ready" != 1 ]; then
		record "$name" not_run - 0 0 "no stx binary or no PJRT plugin"
		return 1
	fi
	step "$name" "$limit" "$STX" "$@"
}

# 2. The plugin's PJRT version, from stx's backend line of a one-row forward on the tiny model
#    (loads the plugin, compiles and runs one graph).
run_stx pjrt_version 90 bench --model tiny --backend "$backend" --json --runs 1 --batch 1 \
	--seq-len 16 --prompt-len 8 --new-tokens 1 --only forward_logprobs
line=$(grep -h -m 1 'backend xla' "$out/logs/pjrt_version.err" 2>/dev/null)
pjrt=$(grep -o 'PJRT C API [0-9]*\.[0-9]*' <<<"$line" | head -n 1 | sed 's/PJRT C API //')
setmeta backend_line "$line"
setmeta pjrt_version "$pjrt"
echo "gpu-check: ${line:-no backend line from stx}"
echo "gpu-check: the plugin implements PJRT C API ${pjrt:-?}"

# 3. The tiny GRPO recipe (builds the tiny-sft starting model first: the cache is new).
run_stx grpo 180 run -a grpo --backend "$backend" --no-watch --runs-dir "$out/runs" \
	--set "knobs.num_rollout=$GRPO_ROLLOUTS"
setmeta grpo_closing "$(grep -h '^grpo done' "$out/logs/grpo.out" 2>/dev/null | tail -n 1)"
if [ -z "$line" ]; then # stx run prints its backend line on stdout
	line=$(grep -h -m 1 'backend xla' "$out/logs/grpo.out" "$out/logs/grpo.err" 2>/dev/null | head -n 1)
	pjrt=$(grep -o 'PJRT C API [0-9]*\.[0-9]*' <<<"$line" | head -n 1 | sed 's/PJRT C API //')
	setmeta backend_line "$line"
	setmeta pjrt_version "$pjrt"
fi

# 4. Speed: the built-in bench model, then a random Qwen2.5-0.5B-shaped bf16 model, one stx
#    process per measurement so that a timeout or a failure loses only its own figure.
run_stx bench_builtin 120 bench --backend "$backend" --json "${bench_args[@]}"
setmeta bench_builtin_args "--model bench ${bench_args[*]}"
run_stx init_qwen 120 init-model --shape qwen2.5-0.5b --dtype bf16 "$out/qwen0.5b"
setmeta qwen_args "--model $out/qwen0.5b ${qwen_args[*]}"
for m in forward_logprobs grpo_train_step sft_train_step kv_cache_sampling; do
	case " $QWEN_MEASUREMENTS " in
	*" $m "*) ;;
	*)
		note="not in QWEN_MEASUREMENTS"
		[ "$QUICK" != 1 ] || note="$note (QUICK=1: a 0.5B train step on a CPU plugin needs 17+ GiB)"
		record "qwen_$m" skipped - 0 0 "$note"
		continue
		;;
	esac
	if [ ! -s "$out/qwen0.5b/model.safetensors" ]; then
		record "qwen_$m" not_run - 0 0 "no model: init_qwen did not write one"
		continue
	fi
	limit=120
	[ "$m" = forward_logprobs ] && limit=90
	run_stx "qwen_$m" "$limit" bench --model "$out/qwen0.5b" --backend "$backend" --json \
		--only "$m" "${qwen_args[@]}"
done
[ "${KEEP_MODEL:-0}" = 1 ] || rm -f "$out/qwen0.5b/model.safetensors"

# 5. The report.
exit_code=$failed
setmeta finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
setmeta total_s "$(($(date +%s) - start))"
setmeta exit_code "$exit_code"
export PEAK_TFLOPS PEAK_TF32_TFLOPS PEAK_FP32_TFLOPS
export MFU_PRECISION=${MFU_PRECISION:-} NVIDIA_TF32_OVERRIDE=${NVIDIA_TF32_OVERRIDE:-}
if ! timeout 60 python3 - "$out" <<'EOF'; then
import json, os, re, sys

out = sys.argv[1]
meta = {}
with open(os.path.join(out, "meta.env")) as f:
    for line in f:
        k, _, v = line.rstrip("\n").partition("=")
        meta[k] = v
steps = []
with open(os.path.join(out, "steps.tsv")) as f:
    for line in f:
        name, status, rc, secs, limit, note = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
        log = os.path.join("logs", name + ".err")
        steps.append({"name": name, "status": status, "exit_code": int(rc) if rc.lstrip("-").isdigit() else None,
                      "seconds": float(secs), "timeout_s": int(limit), "note": note,
                      "log": log if os.path.exists(os.path.join(out, log)) else None})
by_name = {s["name"]: s for s in steps}

# Compute precision. stx loads bf16/f16 weights as float32 (runtime/weights.go setFromTensors:
# Float32s, SetParam) and every graph computes in float32; GoMLX's xla backend emits float32
# dots with no precision, which XLA's GPU compiler runs on TF32 tensor cores on Ampere and later
# (XLA's and JAX's default precision for float32 matmuls; NVIDIA_TF32_OVERRIDE=0 turns that
# off), and stx's tf32 option (XLA_OPTS=,tf32) asks for explicitly. On the CPU plugin: FP32.
peaks = {"bf16": float(os.environ["PEAK_TFLOPS"]), "tf32": float(os.environ["PEAK_TF32_TFLOPS"]),
         "fp32": float(os.environ["PEAK_FP32_TFLOPS"])}
gpu = int(meta.get("dev_nvidia") or 0) > 0 and "cpu" not in os.path.basename(meta.get("plugin", "")).lower()
precision = os.environ.get("MFU_PRECISION") or ("fp32" if not gpu or os.environ.get("NVIDIA_TF32_OVERRIDE") == "0" else "tf32")
if precision not in peaks:
    sys.exit(f"MFU_PRECISION={precision}: want bf16, tf32 or fp32")
compute = {
    "dtype": "float32",
    "weights": "bf16 in the file (init-model --dtype bf16), upcast to float32 when stx loads them",
    "matmul_precision": precision,
    "mfu_peak_tflops": peaks[precision],
    "peaks_tflops": peaks,
    "note": ("MFU = achieved GFLOP/s (stx bench's model-FLOP estimate) / the peak of the precision used: "
             + ("float32 graphs whose matmuls XLA runs on TF32 tensor cores by default on NVIDIA GPUs (assumed, not observed)"
                if precision == "tf32" and gpu else
                "no GPU: MFU against H200 peaks means nothing here" if not gpu else precision)
             + f"; mfu_vs_bf16_peak is against the BF16 peak {peaks['bf16']:g} TFLOP/s, which stx cannot reach while it computes in float32"),
}

def bench(step, model, args):
    s = by_name.get(step)
    rows = []
    path = os.path.join(out, "logs", step + ".out")
    if s is None or not os.path.exists(path):
        return rows
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            m = json.loads(line)
        except ValueError:
            continue
        tf = m.get("gflops", 0) / 1000
        row = {"step": step, "model": model, "args": args, **m}
        row["mfu"] = round(tf / peaks[precision], 6)
        for k, v in peaks.items():
            row[f"mfu_vs_{k}_peak"] = round(tf / v, 6)
        rows.append(row)
    return rows

measurements = bench("bench_builtin", "bench (built-in)", meta.get("bench_builtin_args", ""))
for s in steps:
    if s["name"].startswith("qwen_"):
        measurements += bench(s["name"], "qwen2.5-0.5b (random, bf16 file)", meta.get("qwen_args", ""))

closing = meta.get("grpo_closing", "")
acc = re.search(r"val accuracy ([0-9.]+) → ([0-9.]+)", closing)
g = by_name.get("grpo", {})
report = {
    "started": meta.get("started"), "finished": meta.get("finished"), "total_s": int(meta.get("total_s", 0)),
    "exit_code": int(meta.get("exit_code", 1)), "passed": meta.get("exit_code") == "0",
    "host": meta.get("host"), "quick": meta.get("quick") == "1", "glibc": meta.get("glibc"),
    "stx": {"path": meta.get("stx_path"), "version": meta.get("stx_version"), "revision": meta.get("stx_revision")},
    "gpu": {"name": meta.get("gpu_name"), "driver": meta.get("gpu_driver"), "memory": meta.get("gpu_memory"),
            "compute_cap": meta.get("gpu_compute_cap"), "count": meta.get("gpu_count"),
            "dev_nvidia_devices": int(meta.get("dev_nvidia") or 0)},
    "plugin": {"path": meta.get("plugin"), "source": meta.get("plugin_source"), "pjrt_version": meta.get("pjrt_version"),
               "backend_spec": meta.get("backend_spec"), "backend_line": meta.get("backend_line")},
    "environment": {k: meta.get(k) for k in ("LD_LIBRARY_PATH", "XLA_FLAGS", "STX_CACHE_DIR", "nvidia_dir",
                                             "cuda_data_dir", "python", "python_packages")}
                   | {"GOPJRT_CUDA_CHECKS": "0", "GOMLX_NO_AUTO_INSTALL": "1"},
    "compute": compute,
    "steps": steps,
    "grpo": {"status": g.get("status"), "seconds": g.get("seconds"), "closing_line": closing,
             "val_accuracy_before": float(acc.group(1)) if acc else None,
             "val_accuracy_after": float(acc.group(2)) if acc else None},
    "bench": measurements,
}
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f, indent=2, ensure_ascii=False)
    f.write("\n")

t = []
t.append(f"stx GPU check  {report['started']} → {report['finished']}  ({report['total_s']} s, host {report['host']}"
         + (", QUICK" if report["quick"] else "") + ")")
t.append(f"stx      {meta.get('stx_path')}  ({meta.get('stx_version')}, revision {meta.get('stx_revision')}; {meta.get('glibc')})")
gp = report["gpu"]
t.append(f"GPU      {gp['name']}" + (f", driver {gp['driver']}, {gp['memory']}, compute capability {gp['compute_cap']}" if gp["driver"] else ""))
t.append(f"plugin   {meta.get('plugin') or '-'}  (from {meta.get('plugin_source')}; PJRT C API {meta.get('pjrt_version') or '?'})")
t.append(f"backend  {meta.get('backend_line') or '-'}")
t.append(f"python   {meta.get('python')}; {meta.get('python_packages') or 'no jax packages'}")
t.append(f"NVIDIA   {meta.get('nvidia_dir') or '-'}; XLA_FLAGS={meta.get('XLA_FLAGS') or '-'}")
t.append(f"compute  float32 (bf16 weights upcast at load); MFU against the {precision.upper()} peak "
         f"{peaks[precision]:g} TFLOP/s" + ("" if gpu else " (no GPU: not meaningful)")
         + f"; BF16 peak {peaks['bf16']:g} in column MFU/BF16")
t.append("")
t.append(f"{'STEP':<28} {'STATUS':<8} {'EXIT':>4} {'SECONDS':>8} {'LIMIT':>6}  NOTE")
for s in steps:
    rc = "-" if s["exit_code"] is None else str(s["exit_code"])
    t.append(f"{s['name']:<28} {s['status']:<8} {rc:>4} {s['seconds']:>8.1f} {s['timeout_s']:>6}  {s['note'][:110]}")
t.append("")
t.append(f"GRPO ({g.get('status', '-')}, {g.get('seconds', 0):.1f} s wall): {closing or '(no closing line)'}")
t.append("")
if measurements:
    t.append(f"{'MODEL':<12} {'MEASUREMENT':<18} {'TOKENS/S':>10} {'GFLOP/S':>10} {'MFU/' + precision.upper():>9} "
             f"{'MFU/BF16':>9} {'MEDIAN S':>9} {'RUNS':>4} {'RSS MiB':>8}")
    for m in measurements:
        t.append(f"{m['model'].split()[0]:<12} {m['name']:<18} {m['tokens_per_s']:>10.1f} {m['gflops']:>10.1f} "
                 f"{100 * m['mfu']:>8.2f}% {100 * m['mfu_vs_bf16_peak']:>8.2f}% {m['median_s']:>9.4f} {m['runs']:>4} "
                 f"{m.get('peak_rss_mib', 0):>8.0f}")
    t.append(f"sizes: bench {meta.get('bench_builtin_args')}; qwen {meta.get('qwen_args')}")
else:
    t.append("no bench measurements")
t.append("")
bad = [s["name"] + " " + s["status"] for s in steps if s["status"] not in ("pass", "skipped")]
t.append("result: " + ("PASS, every step passed" if report["passed"] else "FAIL: " + ", ".join(bad))
         + f"  (exit {report['exit_code']}; {out}/report.json, logs in {out}/logs)")
with open(os.path.join(out, "report.txt"), "w") as f:
    f.write("\n".join(t) + "\n")
EOF
	echo "gpu-check: writing the report failed" >&2
	exit_code=1
fi
echo
cat "$out/report.txt" 2>/dev/null
exit "$exit_code"
