//go:build unix

package rundir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

func acquire(path string) (*Lock, error) {
	// A holder releasing its lock unlinks the file before unlocking it; a
	// process that opened the old file in between would lock a nameless
	// inode, so after locking check that the path still names our file and
	// retry otherwise.
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			data, _ := io.ReadAll(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, inUse(path, data)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || !os.SameFile(held, named) {
			f.Close()
			continue
		}
		l := &Lock{path: path, f: f}
		// The file had an owner but nobody held the flock: that owner died.
		data, _ := io.ReadAll(f)
		if o, ok := readOwner(data); ok {
			l.stale = o.PID
		}
		return l, nil
	}
	return nil, fmt.Errorf("lock %s: the lock file keeps changing; is another process starting on this run?", path)
}

// isSyncUnsupported reports an fsync a file system does not implement for
// directories; there is nothing more durable to do then.
func isSyncUnsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}
