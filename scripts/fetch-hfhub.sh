#!/usr/bin/env bash
# fetch-hfhub.sh installs Python's huggingface_hub, pinned, into a directory of its own with
# `pip install --target`, for the reference test of stx's Hugging Face cache (hub/pyref_test.go):
# scripts/hfhub-check.py opens, with huggingface_hub itself and HF_HUB_OFFLINE=1, the snapshots
# that stx downloaded from a fake hub, and the test requires that huggingface_hub finds the same
# snapshot directory and reads every file of it, so that stx and the Python tools share one cache.
#
# Nothing is installed into the user's Python; running it again once the pinned version is
# there does nothing.
#
# Usage: scripts/fetch-hfhub.sh [DIR]
# DIR defaults to $STX_CACHE_DIR/pyref/hfhub, else ${XDG_CACHE_HOME:-~/.cache}/stx/pyref/hfhub:
# where the test looks for it.
set -euo pipefail
cache="${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}"
dir="${1:-$cache/pyref/hfhub}"
# Pinned: the reference must not move under the test (pip brings its dependencies: httpx,
# filelock, fsspec, hf-xet, packaging, pyyaml, tqdm, typing-extensions, ...).
pins=(huggingface_hub==2.4.0)
stamp="$dir/.stx-pins"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ] && [ -d "$dir/huggingface_hub" ]; then
	echo "fetch-hfhub: ${pins[*]} already in $dir"
	exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
	echo "fetch-hfhub: python3 with pip is needed" >&2
	exit 1
fi
mkdir -p "$dir"
"$python" -m pip install --quiet --disable-pip-version-check --no-input --upgrade \
	--target "$dir" "${pins[@]}"
echo "${pins[*]}" >"$stamp"
echo "fetch-hfhub: installed ${pins[*]} in $dir"
