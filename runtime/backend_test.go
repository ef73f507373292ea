package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/runtime/cpu/blas"
)

func TestNormalizeBackendSpec(t *testing.T) {
	plugin := filepath.Join(t.TempDir(), "pjrt_c_api_cuda_plugin.so")
	if err := os.WriteFile(plugin, []byte("not really a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ in, want, err string }{
		{"", DefaultBackendSpec(), ""},
		{"go", SimpleGoSpec, ""},
		{"cpu", "cpu", ""},
		{"cpu:", "cpu", ""},
		{"go:ops_sequential", "go:ops_sequential", ""},
		{"go:foo", "go:ops_sequential,foo", ""},
		{"go:parallelism=2", "go:parallelism=2", ""},
		{"xla:cuda", "xla:cuda", ""},
		{"xla:" + plugin, "xla:" + plugin, ""},
		{plugin, "xla:" + plugin, ""},
		{"xla", "xla", ""},
		{"xla:/no/such/plugin.so", "", "does not exist"},
		{"tpu", "", "unknown backend"},
	}
	for _, c := range cases {
		got, err := NormalizeBackendSpec(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestNewBackend(t *testing.T) {
	t.Setenv("GOMLX_BACKEND", "")
	b, err := NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec != DefaultBackendSpec() || b.Source != "default" || !strings.Contains(b.Describe(), DefaultBackendSpec()) {
		t.Errorf("default backend: %s", b.Describe())
	}
	// The cpu backend names its GEMM: where OpenBLAS loads, the default is cpu and says so.
	if blas.Available() && (b.Name() != "cpu" || !strings.Contains(b.Describe(), "OpenBLAS")) {
		t.Errorf("OpenBLAS is loaded but the default backend is %s", b.Describe())
	}
	t.Setenv("GOMLX_BACKEND", "go:parallelism=-1")
	if b, err := NewBackend(""); err != nil || b.Source != "$GOMLX_BACKEND" {
		t.Errorf("backend from the environment: %v, %v", b, err)
	}
}

// TestXLAWithoutPluginFailsClearly: asking for XLA where no PJRT plugin is configured must be
// an error (no panic, no download attempt).
func TestXLAWithoutPluginFailsClearly(t *testing.T) {
	t.Setenv("PJRT_PLUGIN_LIBRARY_PATH", t.TempDir())
	for _, spec := range []string{"xla:cuda", "xla:cpu", "xla"} {
		_, err := NewBackend(spec)
		if err == nil {
			t.Skipf("%s: a PJRT plugin is installed on this machine", spec)
		}
		if !xlaCompiledIn {
			if !strings.Contains(err.Error(), "without XLA support") {
				t.Errorf("%s: %v", spec, err)
			}
			continue
		}
		if !strings.Contains(err.Error(), "plugin") || strings.Contains(err.Error(), "auto-install") {
			t.Errorf("%s: unclear error %v", spec, err)
		}
		t.Logf("%s: %v", spec, err)
	}
	bad := filepath.Join(t.TempDir(), "fake_plugin.so")
	if err := os.WriteFile(bad, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBackend(bad); err == nil {
		t.Error("a file that is not a PJRT plugin was accepted")
	} else {
		t.Logf("%s: %v", bad, err)
	}
}
