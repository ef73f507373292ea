//go:build unix

package runtime

import "syscall"

// processCPUSeconds is the user and system CPU time the process has used: benchmarks report
// CPU seconds per operation beside wall time, which is the steadier of the two on a machine
// shared with other work.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
