#!/usr/bin/env bash
# fetch-peft.sh installs Hugging Face's PEFT and transformers, pinned, into a directory of their
# own with `pip install --target`, for the reference test of stx's LoRA (runtime/lora_peft_ref_test.go):
# scripts/peft-check.py loads an adapter that stx saved with PEFT on the same base and compares
# log-probs, and makes an adapter with PEFT that stx loads.
#
# They run on Debian's PyTorch (python3-torch, 1.13, CPU, at /usr/bin/python3): the PyPI torch
# wheel for Linux pulls gigabytes of CUDA packages. The script installs python3-torch with
# apt-get where it is missing and it can (root, or sudo without a password). The pins are the
# last versions that support torch 1.13, installed with --no-deps so that pip never brings a
# torch of its own; numpy, pyyaml, requests and psutil come with python3-torch (Jinja2 writes
# the model card of save_pretrained).
#
# Usage: scripts/fetch-peft.sh [DIR]
# DIR defaults to $STX_CACHE_DIR/pyref/peft, else ${XDG_CACHE_HOME:-~/.cache}/stx/pyref/peft:
# where the test looks for it. The interpreter with torch is recorded in DIR/.stx-python.
set -euo pipefail
. "$(dirname "$0")/pyref.sh"
torch_python=${STX_TORCH_PYTHON:-/usr/bin/python3}
if ! "$torch_python" -c 'import torch' 2>/dev/null; then
	apt=(apt-get)
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null; then apt=(sudo -n apt-get); else apt=(); fi
	fi
	if [ ${#apt[@]} -eq 0 ]; then
		echo "fetch-peft: $torch_python has no torch and apt-get needs root: apt-get install python3-torch" >&2
		exit 1
	fi
	echo "fetch-peft: installing python3-torch (Debian's CPU PyTorch)"
	DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q --no-install-recommends python3-torch >/dev/null ||
		{ "${apt[@]}" update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q --no-install-recommends python3-torch >/dev/null; }
fi
pins=(--no-deps peft==0.10.0 transformers==4.40.2 accelerate==0.29.3 tokenizers==0.19.1
	huggingface-hub==0.23.4 safetensors==0.4.3 regex==2024.5.15 tqdm==4.66.4 filelock==3.15.4
	packaging==24.1 fsspec==2024.6.1 jinja2==3.1.4 markupsafe==2.1.5)
# The install's own check cannot import them (pip's Python may lack torch): it looks for them.
pyref_install peft "${1:-}" 'import importlib.util as u; assert all(u.find_spec(m) for m in ("peft", "transformers", "accelerate"))' "${pins[@]}"
dir=${1:-"${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}/pyref/peft"}
PYTHONPATH="$dir" PYTHONDONTWRITEBYTECODE=1 "$torch_python" -c 'import torch, peft, transformers; print("fetch-peft: torch", torch.__version__, "peft", peft.__version__, "transformers", transformers.__version__)'
command -v "$torch_python" >"$dir/.stx-python"
