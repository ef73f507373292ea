#!/usr/bin/env bash
# fetch-jinja.sh installs Python's Jinja2 (and MarkupSafe), pinned, into a directory of its own
# with `pip install --target`, for the reference test of stx's chat templates
# (runtime/chat/jinja2_test.go): scripts/render-chat.py renders the same cases there with
# Jinja2 set up exactly as Hugging Face transformers' apply_chat_template sets it up, and the
# test requires stx's renderings to be identical.
#
# Nothing is installed into the user's Python; running it again once the pinned versions are
# there does nothing.
#
# Usage: scripts/fetch-jinja.sh [DIR]
# DIR defaults to $STX_CACHE_DIR/pyref/jinja, else ${XDG_CACHE_HOME:-~/.cache}/stx/pyref/jinja:
# where the test looks for it.
set -euo pipefail
cache="${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}"
dir="${1:-$cache/pyref/jinja}"
# Pinned: the reference must not move under the test. Jinja2 3.1.x is what transformers
# requires (>= 3.1.0); MarkupSafe is its one dependency.
pins=(jinja2==3.1.6 markupsafe==3.0.3)
stamp="$dir/.stx-pins"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ] && [ -d "$dir/jinja2" ]; then
	echo "fetch-jinja: ${pins[*]} already in $dir"
	exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
	echo "fetch-jinja: python3 with pip is needed" >&2
	exit 1
fi
mkdir -p "$dir"
"$python" -m pip install --quiet --disable-pip-version-check --no-input --upgrade \
	--target "$dir" "${pins[@]}"
echo "${pins[*]}" >"$stamp"
echo "fetch-jinja: installed ${pins[*]} in $dir"
