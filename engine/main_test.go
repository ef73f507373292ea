package engine

import (
	"fmt"
	"os"
	"testing"

	"stx.dev/stx/engine/workflow"
)

// TestMain gives the package's tests a cache of built-in starting models of their own
// (STX_CACHE_DIR): each model is built once per test binary, by the first test that
// needs it, and never lands in the user's cache.
func TestMain(m *testing.M) {
	// The test binary stands in for stx when a recipe's workflow command is
	// ["stx", "env", "calculator"]: it is started as itself with argv[0] "stx".
	if len(os.Args) == 3 && os.Args[0] == "stx" && os.Args[1] == "env" && os.Args[2] == "calculator" {
		if err := workflow.ServeCalculator(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
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
