//go:build unix

package cpu

import "syscall"

// minorFaults returns the process's minor page faults so far (opstats.go).
func minorFaults() int64 {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return int64(u.Minflt)
}
