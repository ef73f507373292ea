#!/usr/bin/env bash
# Cold `stx vet` of the built-in catalog against `cue vet -c` of the same
# catalog with the same schema (stx schema), alternating, N runs each.
# Prints both medians and their ratio. Needs the Go module proxy once, to
# build cue (cuelang.org/go/cmd/cue at the version go.mod uses).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/stx" ./cmd/stx
cuever=$(go list -m -f '{{.Version}}' cuelang.org/go)
GOBIN="$tmp" go install "cuelang.org/go/cmd/cue@$cuever"
mkdir "$tmp/cat"
cp recipes.cue "$tmp/cat/"
"$tmp/stx" schema > "$tmp/cat/schema.cue"
"$tmp/cue" vet -c "$tmp/cat/schema.cue" "$tmp/cat/recipes.cue"
"$tmp/stx" vet -q "$tmp/cat/recipes.cue"
for _ in $(seq "$n"); do
  /usr/bin/time -f "cue %e" -a -o "$tmp/times" "$tmp/cue" vet -c "$tmp/cat/schema.cue" "$tmp/cat/recipes.cue"
  /usr/bin/time -f "stx %e" -a -o "$tmp/times" "$tmp/stx" vet -q "$tmp/cat/recipes.cue"
done
median() { grep "^$1 " "$tmp/times" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
c=$(median cue); s=$(median stx)
echo "cue vet -c: median ${c}s; stx vet: median ${s}s; ratio $(awk -v s="$s" -v c="$c" 'BEGIN {printf "%.2f", s/c}')x ($n runs each)"
