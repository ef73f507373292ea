#!/usr/bin/env bash
# fetch-mathverify.sh installs Hugging Face's Math-Verify (the Python reference for stx's `math`
# reward) from the Python package index into a directory outside the repository, for
# engine/tasks/mathverify_test.go: the test runs scripts/mathverify-labels.py with it over
# engine/tasks/testdata/mathverify/cases.jsonl and checks that the committed labels are
# Math-Verify's. stx itself never runs Python; this is a test-time reference only.
#
# The versions are pinned (math-verify, its LaTeX parser, sympy, mpmath and the ANTLR runtime):
# the labels are a function of them. math-verify's extras antlr4-9-3, antlr4-11-0 and antlr4-13-2
# only choose the ANTLR runtime of its LaTeX parser; the runtime is pinned here directly, as
# [antlr4-13-2] would, without pip's warnings about extra names. Nothing is fetched again when
# DIR already holds these pins; the installation appears under DIR only once pip has finished it,
# and DIR is replaced whole, so it must be new, empty or an earlier installation.
#
# Usage: scripts/fetch-mathverify.sh [DIR]
# DIR defaults to $STX_MATHVERIFY_DIR, else $STX_CACHE_DIR/pyref/mathverify, else
# ${XDG_CACHE_HOME:-~/.cache}/stx/pyref/mathverify: where the test looks for it.
set -euo pipefail
. "$(dirname "$0")/pyref.sh"
pins=(
	"math-verify==0.9.0"
	"latex2sympy2_extended==1.11.0"
	"antlr4-python3-runtime==4.13.2"
	"sympy==1.14.0"
	"mpmath==1.3.0"
)
pyref_install mathverify "${1:-${STX_MATHVERIFY_DIR:-}}" 'import math_verify; math_verify.verify(math_verify.parse("$1$"), math_verify.parse("1"))' "${pins[@]}"
