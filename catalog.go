// Package stx holds what the stx binary carries besides code: the built-in
// recipe catalog (recipes.cue at the repository root, embedded so that
// `stx run -a grpo` works from any directory).
package stx

import _ "embed"

// Catalog is the CUE source of the built-in recipes (recipes.cue).
//
//go:embed recipes.cue
var Catalog []byte
