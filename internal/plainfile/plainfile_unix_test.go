//go:build unix

package plainfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRefusesSpecialFiles: a FIFO must not block, a device or a directory
// must not be read.
func TestRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	cases := map[string]string{fifo: "named pipe (FIFO)", dir: "directory"}
	if st, err := os.Stat("/dev/zero"); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		cases["/dev/zero"] = "character device"
	}
	for path, what := range cases {
		_, err := ReadFile(path, 0)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), what) {
			t.Errorf("ReadFile(%s) = %v, want %q", path, err, what)
		}
		if f, _, err := Open(path); err == nil {
			f.Close()
			t.Errorf("Open(%s) succeeded", path)
		}
	}
}
