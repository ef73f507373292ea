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
. "$(dirname "$0")/pyref.sh"
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
pyref_install tensorboard "${1:-${STX_TENSORBOARD_DIR:-}}" 'from tensorboard.backend.event_processing import event_accumulator; from tensorboard.util import tensor_util' "${pins[@]}"
