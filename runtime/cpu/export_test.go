package cpu

import "github.com/gomlx/gomlx/backends"

// NewUnfusedForTest returns a cpu backend that compiles without broadcast fusion, for the
// tests outside the package that compare both programs.
func NewUnfusedForTest() backends.Backend { return &Backend{noFuse: true} }
