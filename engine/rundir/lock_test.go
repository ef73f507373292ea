package rundir

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestAcquireLockOwnerWriteFails: a lock whose owner line cannot be written is
// refused with the error and released, so that the directory can be locked again.
func TestAcquireLockOwnerWriteFails(t *testing.T) {
	dir := t.TempDir()
	boom := errors.New("disk full")
	saved := writeOwner
	writeOwner = func(*os.File, []byte) error { return boom }
	l, err := AcquireLock(dir)
	writeOwner = saved
	if !errors.Is(err, boom) {
		l.Release()
		t.Fatalf("AcquireLock with a failing owner write: lock %v, error %v; want %v", l, err, boom)
	}
	if l != nil {
		t.Errorf("AcquireLock returned a lock with its error")
	}
	l, err = AcquireLock(dir)
	if err != nil {
		t.Fatalf("AcquireLock after the failed one: %v", err)
	}
	defer l.Release()
	data, err := os.ReadFile(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"pid"`) {
		t.Errorf("lock file %q has no owner line", data)
	}
}
