//go:build !unix

package cpu

// minorFaults is 0 where the system does not count page faults per process (opstats.go).
func minorFaults() int64 { return 0 }
