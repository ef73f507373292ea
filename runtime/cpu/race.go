//go:build race

package cpu

// The race detector checks only accesses to the Go heap: keep every buffer there so that it
// sees the kernels' (hostmem.go).
func init() { offHeapMin = 0 }
