//go:build ((linux && amd64) || darwin) && !noxla && cgo

package runtime

import "testing"

// TestWithExactLowPrecision: stx turns XLA's excess precision off (bfloat16 products keep their
// rounding) unless XLA_FLAGS already sets the flag either way.
func TestWithExactLowPrecision(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "--xla_allow_excess_precision=false"},
		{"--xla_force_host_platform_device_count=4", "--xla_force_host_platform_device_count=4 --xla_allow_excess_precision=false"},
		{"--xla_allow_excess_precision=true", "--xla_allow_excess_precision=true"},
		{"--xla_gpu_cuda_data_dir=/x --xla_allow_excess_precision=false", "--xla_gpu_cuda_data_dir=/x --xla_allow_excess_precision=false"},
	} {
		if got := withExactLowPrecision(c.in); got != c.want {
			t.Errorf("withExactLowPrecision(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
