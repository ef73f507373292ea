//go:build unix

package tasks

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"stx.dev/stx/internal/plainfile"
)

// TestLoadJSONLRefusesSpecialFiles: a FIFO as a dataset must not block the
// run, a device must not be read until memory runs out.
func TestLoadJSONLRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "data.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	for path, what := range map[string]string{fifo: "named pipe (FIFO)", "/dev/zero": "character device"} {
		_, err := LoadJSONL(path)
		if !errors.Is(err, plainfile.ErrNotRegular) || !strings.Contains(err.Error(), what) {
			t.Errorf("LoadJSONL(%s) = %v, want a %s refused", path, err, what)
		}
	}
}
