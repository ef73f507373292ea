package cpu

import "github.com/gomlx/gomlx/backends"

// NewUnfusedForTest returns a cpu backend that compiles without broadcast fusion, for the
// tests outside the package that compare both programs.
func NewUnfusedForTest() backends.Backend { return &Backend{noFuse: true} }

// NewPairedForTest and NewUnpairedForTest return cpu backends that run independent products
// side by side whenever they can, and never (pair.go), for the tests outside the package that
// compare both programs.
func NewPairedForTest() backends.Backend   { return &Backend{pairing: pairOn} }
func NewUnpairedForTest() backends.Backend { return &Backend{pairing: pairOff} }
