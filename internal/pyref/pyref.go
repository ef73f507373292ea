// Package pyref finds the Python packages that tests compare stx with (Jinja2,
// huggingface_hub, TensorBoard, Math-Verify). scripts/fetch-<name>.sh installs each with
// `pip install --target` outside the tree, under the stx cache directory; a test that needs
// one calls Require, which skips the test when it is missing, or fails it under CI=true,
// where .ci/run has fetched every reference and a missing one is an error.
package pyref

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// startCache is STX_CACHE_DIR as the process started with it: engine's TestMain gives its
// tests a cache directory of their own, where no reference is installed.
var startCache = os.Getenv("STX_CACHE_DIR")

// Dir is where scripts/fetch-<name>.sh installs the reference name: $STX_CACHE_DIR/pyref/name,
// else the user's cache directory ($XDG_CACHE_HOME or ~/.cache) + /stx/pyref/name.
func Dir(name string) string {
	cache := startCache
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "stx")
	}
	return filepath.Join(cache, "pyref", name)
}

// Ref is an installed reference.
type Ref struct {
	// Dir holds the installed packages (PYTHONPATH).
	Dir string
	// Python is the interpreter that runs them.
	Python string
}

// Require returns the reference that scripts/fetch-<fetch>.sh installs in dir (Dir(name)
// when dir is ""), checked by the path marker inside it (e.g. "jinja2/__init__.py"), and
// python3. When either is missing it skips t, or fails it under CI=true.
func Require(t testing.TB, name, dir, marker, fetch string) Ref {
	t.Helper()
	if dir == "" {
		dir = Dir(name)
	}
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: .ci/run installs it with scripts/%s)", msg, fetch)
		}
		t.Skipf("%s: run scripts/%s", msg, fetch)
	}
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		missing("the Python reference %s is not installed in %s", name, dir)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		missing("no python3 to run the Python reference %s", name)
	}
	return Ref{Dir: dir, Python: python}
}

// Env is the environment a reference's script runs with: the process's, with the packages
// on PYTHONPATH, no bytecode written into the install, and UTF-8 I/O.
func (r Ref) Env(extra ...string) []string {
	return append(append(os.Environ(), "PYTHONPATH="+r.Dir, "PYTHONDONTWRITEBYTECODE=1", "PYTHONIOENCODING=utf-8"), extra...)
}
