//go:build ((linux && amd64) || darwin) && !noxla && cgo

package runtime

import (
	"os"
	"strings"
	"testing"

	"stx.dev/stx/runtime/xlaplugin"
)

// fetchedPlugin returns the default XLA CPU plugin of scripts/fetch-pjrt.sh; the test skips
// without it, except under CI=true, which always fetches it.
func fetchedPlugin(t *testing.T) {
	t.Helper()
	if _, err := xlaplugin.Find("cpu"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI fetches XLA's CPU plugin with scripts/fetch-pjrt.sh: %v", err)
		}
		t.Skip(err)
	}
}

// TestXLADevicesAndOptions: the CPU plugin's device count comes from "devices=N", else from
// XLA_FLAGS's --xla_force_host_platform_device_count, else 1 (as on the cpu backend); unknown
// options are refused.
func TestXLADevicesAndOptions(t *testing.T) {
	fetchedPlugin(t)
	t.Setenv("XLA_FLAGS", "")
	for _, c := range []struct {
		spec, flags string
		want        int
	}{
		{"xla:cpu", "", 1},
		{"xla:cpu,devices=3", "", 3},
		{"xla:cpu", "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=2", 2},
		{"xla:cpu,devices=4", "--xla_force_host_platform_device_count=2", 4},
	} {
		t.Setenv("XLA_FLAGS", c.flags)
		b, err := NewBackend(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if b.NumDevices() != c.want || b.Plugin == nil || !strings.Contains(b.Describe(), "PJRT C API 0.") {
			t.Errorf("%s with XLA_FLAGS=%q: %d devices (want %d): %s", c.spec, c.flags, b.NumDevices(), c.want, b.Describe())
		}
	}
	for _, bad := range []string{"xla:cpu,devices=0", "xla:cpu,devices=x", "xla:cpu,fast"} {
		if _, err := NewBackend(bad); err == nil || !strings.Contains(err.Error(), "option") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestForcedHostDevices(t *testing.T) {
	for flags, want := range map[string]int{
		"": 0, "--xla_force_host_platform_device_count=8": 8, "-xla_force_host_platform_device_count=3 --other=1": 3,
		"--xla_force_host_platform_device_count=x": 0,
	} {
		if got := forcedHostDevices(flags); got != want {
			t.Errorf("%q: %d, want %d", flags, got, want)
		}
	}
}
