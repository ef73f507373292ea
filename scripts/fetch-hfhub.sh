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
. "$(dirname "$0")/pyref.sh"
# Pinned: the reference must not move under the test (pip brings its dependencies: httpx,
# filelock, fsspec, hf-xet, packaging, pyyaml, tqdm, typing-extensions, ...).
pins=(huggingface_hub==2.4.0)
pyref_install hfhub "${1:-}" 'import huggingface_hub' "${pins[@]}"
