package tasks

import (
	"fmt"
	"os"

	"stx.dev/stx/internal/plainfile"
)

// openDataFile opens a dataset for reading. Only a regular file is opened:
// a named pipe would block the run before its first rollout, and a device
// such as /dev/zero would be read until memory runs out.
func openDataFile(path string) (*os.File, error) {
	f, _, err := plainfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read dataset: %w", err)
	}
	return f, nil
}
