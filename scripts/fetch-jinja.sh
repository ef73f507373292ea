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
. "$(dirname "$0")/pyref.sh"
# Pinned: the reference must not move under the test. Jinja2 3.1.x is what transformers
# requires (>= 3.1.0); MarkupSafe is its one dependency.
pins=(jinja2==3.1.6 markupsafe==3.0.3)
pyref_install jinja "${1:-}" 'import jinja2, markupsafe' "${pins[@]}"
