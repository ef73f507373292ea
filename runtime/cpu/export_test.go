package cpu

import "github.com/gomlx/gomlx/backends"

// NewUnfusedForTest returns a cpu backend that compiles without broadcast fusion, for the
// tests outside the package that compare both programs.
func NewUnfusedForTest() backends.Backend { return &Backend{noFuse: true} }

// NewUnpairedForTest returns a cpu backend that runs no products side by side (pair.go), for
// the tests outside the package that compare both programs.
func NewUnpairedForTest() backends.Backend { return &Backend{noPair: true} }
