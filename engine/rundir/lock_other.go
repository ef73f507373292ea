//go:build !unix

package rundir

import (
	"errors"
	"fmt"
	"os"
)

func acquire(path string) (*Lock, error) {
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return &Lock{path: path, f: f}, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // released meanwhile
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		o, ok := readOwner(data)
		if !ok || processAlive(o.PID) {
			return nil, inUse(path, data)
		}
		// The holder is gone: take its lock over.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("lock %s: remove stale lock of process %d: %w", path, o.PID, err)
		}
		l, err := acquire(path)
		if l != nil {
			l.stale = o.PID
		}
		return l, err
	}
	return nil, fmt.Errorf("lock %s: the lock file keeps changing; is another process starting on this run?", path)
}

// processAlive reports whether pid runs; os.FindProcess fails for a pid
// that does not exist on the systems this file builds for (Windows).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}

func isSyncUnsupported(error) bool { return true }
