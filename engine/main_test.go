package engine

import (
	"fmt"
	"os"
	"testing"
)

// TestMain gives the package's tests a cache of built-in starting models of their own
// (STX_CACHE_DIR): each model is built once per test binary, by the first test that
// needs it, and never lands in the user's cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stx-engine-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("STX_CACHE_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
