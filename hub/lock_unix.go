//go:build unix

package hub

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock(2) lock on f, waiting for it: the lock
// Python's filelock (huggingface_hub's) takes on the same file.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
