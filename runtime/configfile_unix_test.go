//go:build unix

package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadHFConfigRefusesFIFO: a config.json that is a named pipe (reading
// it would block for ever) is refused at once, as is an oversized one.
func TestReadHFConfigRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "config.json"), 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	if _, err := ReadHFConfig(dir); err == nil || !strings.Contains(err.Error(), "reading model config") {
		t.Errorf("FIFO config: %v", err)
	}
	big := t.TempDir()
	f, err := os.Create(filepath.Join(big, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxConfigFile + 1); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadHFConfig(big); err == nil || !strings.Contains(err.Error(), "reading model config") {
		t.Errorf("oversized config: %v", err)
	}
}
