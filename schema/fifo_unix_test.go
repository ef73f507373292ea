//go:build unix

package schema

import (
	"errors"
	"syscall"
)

var errNoFIFO = errors.New("no FIFOs on this system")

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
