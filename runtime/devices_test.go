package runtime

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// devicesBackend returns a backend with n devices of the kind the tests run on: the cpu
// backend's virtual devices ("cpu:devices=N"), or, when $GOMLX_BACKEND names an xla backend,
// that PJRT plugin with n devices ("xla:<plugin>,devices=N": XLA's CPU plugin gives each its
// own device and its own compiled program, and all-reduces through XLA's collectives). So the
// multi-device tests check GoMLX's SPMD path on XLA as they check it on the cpu backend.
func devicesBackend(t *testing.T, n int) *Backend {
	t.Helper()
	spec := fmt.Sprintf("cpu:devices=%d", n)
	if norm, err := NormalizeBackendSpec(os.Getenv("GOMLX_BACKEND")); err == nil && strings.HasPrefix(norm, "xla") {
		plugin, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(norm, "xla"), ":"), ",")
		if plugin == "" {
			plugin = "cpu"
		}
		spec = fmt.Sprintf("xla:%s,devices=%d", plugin, n)
	}
	b, err := NewBackend(spec)
	if err != nil {
		t.Fatal(err)
	}
	if b.NumDevices() != n {
		t.Fatalf("%s: %d devices, want %d", spec, b.NumDevices(), n)
	}
	return b
}
