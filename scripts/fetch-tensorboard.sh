#!/usr/bin/env bash
# fetch-tensorboard.sh installs TensorBoard (the reader of the event files `stx run` writes in
# runs/<id>/tb/) from the Python package index into a directory outside the repository, for
# engine/tensorboard_test.go: the test runs scripts/tb-read.py with it over a run's tb/ directory
# and checks that TensorBoard reads back every metric of metrics.jsonl and the recipe. stx itself
# never runs Python; this is a test-time reference only.
#
# TensorBoard and every package it pulls in are pinned, so that the reference does not move under
# the test. Nothing is fetched again when DIR already holds these pins; the installation appears
# under DIR only once pip has finished it.
#
# Usage: scripts/fetch-tensorboard.sh [DIR]
# DIR defaults to $STX_TENSORBOARD_DIR, else $STX_CACHE_DIR/pyref/tensorboard, else
# ${XDG_CACHE_HOME:-~/.cache}/stx/pyref/tensorboard: where the test looks for it.
set -euo pipefail
cache="${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}"
dir="${1:-${STX_TENSORBOARD_DIR:-$cache/pyref/tensorboard}}"
pins=(
	"tensorboard==2.21.0"
	"tensorboard-data-server==0.7.2"
	"protobuf==7.36.2"
	"numpy==2.4.6"
	"absl-py==2.5.1"
	"grpcio==1.85.3"
	"markdown==3.11.3"
	"markupsafe==3.0.4"
	"packaging==26.4"
	"pillow==13.0.0"
	"setuptools==84.2.1"
	"typing_extensions==4.16.0"
	"werkzeug==3.1.9"
)
stamp="${pins[*]}"
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
	echo "fetch-tensorboard: python3 with pip is needed" >&2
	exit 1
fi
check='from tensorboard.backend.event_processing import event_accumulator; from tensorboard.util import tensor_util'
if [ -f "$dir/.stx-pins" ] && [ "$(cat "$dir/.stx-pins")" = "$stamp" ] &&
	PYTHONPATH="$dir" "$python" -c "$check" 2>/dev/null; then
	echo "fetch-tensorboard: TensorBoard already in $dir"
	exit 0
fi
parent=$(dirname "$dir")
mkdir -p "$parent"
tmp=$(mktemp -d "$parent/.fetch-tensorboard-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-tensorboard: installing ${pins[*]}"
PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
	--target "$tmp" "${pins[@]}"
PYTHONPATH="$tmp" "$python" -c "$check"
echo "$stamp" >"$tmp/.stx-pins"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "fetch-tensorboard: TensorBoard 2.21.0 -> $dir"
