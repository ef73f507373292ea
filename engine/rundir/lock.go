package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrInUse is returned (wrapped) when another process holds a run
// directory's lock.
var ErrInUse = errors.New("run directory in use")

// lockOwner is the content of a lock file: who holds it, for the message a
// second process prints.
type lockOwner struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host,omitempty"`
	Since time.Time `json:"since"`
}

// Lock is an exclusive claim by one process on a run directory: two
// processes appending to the same metrics file or renaming checkpoints
// under each other would corrupt the run.
//
// On Unix the claim is an flock(2) on the lock file, which the kernel
// drops when its holder dies, so a lock file left by a crashed (dead) pid
// is simply taken over; the file's content (pid, host, time) only serves
// the error message. Elsewhere the file is created exclusively and a lock
// whose pid no longer runs is taken over.
type Lock struct {
	path string
	f    *os.File
	// stale is the pid of a dead holder whose lock file this lock took
	// over, or 0.
	stale int
}

// AcquireLock claims dir (which must exist) for this process. It fails
// with an error wrapping ErrInUse, naming the holder's pid, when another
// process (or another Lock in this process) holds it.
func AcquireLock(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockFile)
	l, err := acquire(path)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	owner, _ := json.Marshal(lockOwner{PID: os.Getpid(), Host: host, Since: time.Now().UTC().Truncate(time.Second)})
	if err := writeOwner(l.f, append(owner, '\n')); err != nil {
		l.Release()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return l, nil
}

// writeOwner replaces the lock file's content with the owner line; a test
// replaces it to fail.
var writeOwner = func(f *os.File, line []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(line, 0)
	return err
}

// Path is the lock file.
func (l *Lock) Path() string { return l.path }

// TookOver is the pid of a dead process whose lock this one replaced, or 0.
func (l *Lock) TookOver() int { return l.stale }

// Release gives the directory up. The lock file is removed while the lock
// is still held, so no other process can end up holding a lock on a file
// that no longer has a name.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	rmErr := os.Remove(l.path)
	err := l.f.Close() // closing drops the flock
	l.f = nil
	if rmErr != nil && !os.IsNotExist(rmErr) {
		return fmt.Errorf("unlock %s: %w", l.path, rmErr)
	}
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

// readOwner parses a lock file's content; ok is false when it holds no pid.
func readOwner(data []byte) (lockOwner, bool) {
	var o lockOwner
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(data))), &o); err != nil || o.PID <= 0 {
		return lockOwner{}, false
	}
	return o, true
}

// inUse is the error for a directory another process holds.
func inUse(path string, data []byte) error {
	dir := filepath.Dir(path)
	o, ok := readOwner(data)
	if !ok {
		return fmt.Errorf("%w: %s is locked by another process (lock file %s)", ErrInUse, dir, path)
	}
	who := fmt.Sprintf("process %d", o.PID)
	if o.PID == os.Getpid() {
		who = fmt.Sprintf("this process (%d)", o.PID)
	}
	if o.Host != "" {
		who += " on " + o.Host
	}
	return fmt.Errorf("%w: %s is used by %s since %s; wait for it to end or stop it (lock file %s)",
		ErrInUse, dir, who, o.Since.Format(time.RFC3339), path)
}
