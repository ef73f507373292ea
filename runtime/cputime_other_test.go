//go:build !unix

package runtime

// processCPUSeconds is not measured here (see the unix version).
func processCPUSeconds() float64 { return 0 }
