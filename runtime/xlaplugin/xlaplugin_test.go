//go:build ((linux && amd64) || darwin) && !noxla && cgo

package xlaplugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cc builds C sources with the compiler cgo uses.
func cc(t *testing.T, args ...string) {
	t.Helper()
	compiler := os.Getenv("CC")
	if compiler == "" {
		compiler = "cc"
	}
	if out, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, out)
	}
}

// fakePlugin builds testdata/fakeplugin.c as a plugin of PJRT version 0.<minor>.
func fakePlugin(t *testing.T, minor string) string {
	t.Helper()
	so := filepath.Join(t.TempDir(), "pjrt_c_api_fake"+minor+"_plugin.so")
	cc(t, "-shared", "-fPIC", "-O1", "-DMINOR="+minor, "-o", so, "testdata/fakeplugin.c")
	return so
}

// TestWrapperPadsArguments: through the wrapper, a plugin that wants larger argument structs
// than the caller knows (as a PJRT 0.115 plugin may from go-xla's 0.83 header) sees them
// zero-padded, including Execute's nested options; outputs come back into the caller's
// struct, whose size and options pointer stay as they were. Unwrapped, the plugin refuses.
func TestWrapperPadsArguments(t *testing.T) {
	so := fakePlugin(t, "115")
	bin := filepath.Join(t.TempDir(), "compat_check")
	cc(t, "-O1", "-o", bin, "testdata/compat_check.c", "compat.c", so, "-ldl", "-Wl,-rpath,"+filepath.Dir(so))
	out, err := exec.Command(bin, so).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("compat_check: %v\n%s", err, out)
	}
}

// TestLoadChecksVersion: plugins outside the supported PJRT range are refused with their
// version and the range; one inside it newer than go-xla's header is wrapped, and go-xla's
// own calls at registration (Plugin_Initialize, Plugin_Attributes) go through the wrapper.
func TestLoadChecksVersion(t *testing.T) {
	for _, minor := range []string{"60", "200"} {
		_, err := Load(fakePlugin(t, minor))
		if err == nil || !strings.Contains(err.Error(), "PJRT C API 0."+minor) || !strings.Contains(err.Error(), "stx supports 0.81 to 0.115") {
			t.Errorf("PJRT 0.%s: %v", minor, err)
		}
	}
	before := WrappedCalls()
	p, err := Load(fakePlugin(t, "100"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Wrapped || p.Version() != "0.100" || WrappedCalls() < before+2 {
		t.Errorf("PJRT 0.100: wrapped %v, version %s, calls through the wrapper %d", p.Wrapped, p.Version(), WrappedCalls()-before)
	}
	if again, err := Load(p.Path); err != nil || again != p {
		t.Errorf("loading %s again: %v, %v", p.Path, again, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.so")); err == nil {
		t.Error("a missing file loaded")
	}
	notELF := filepath.Join(t.TempDir(), "pjrt_c_api_bad_plugin.so")
	if err := os.WriteFile(notELF, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(notELF); err == nil || !strings.Contains(err.Error(), notELF) {
		t.Errorf("not a library: %v", err)
	}
}

// TestFind: names resolve in $PJRT_PLUGIN_LIBRARY_PATH alone when it is set, else in stx's
// plugin directory; a missing plugin's error says where stx looked and how to get one.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	so := filepath.Join(dir, "pjrt_c_api_cpu_plugin.so")
	if err := os.WriteFile(so, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PJRT_PLUGIN_LIBRARY_PATH", "")
	t.Setenv("STX_PJRT_DIR", dir)
	if got, err := Find("cpu"); err != nil || got != so {
		t.Errorf("Find(cpu) in STX_PJRT_DIR: %q, %v", got, err)
	}
	empty := t.TempDir()
	t.Setenv("PJRT_PLUGIN_LIBRARY_PATH", empty)
	_, err := Find("cpu")
	if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "fetch-pjrt.sh") {
		t.Errorf("Find(cpu) with an empty PJRT_PLUGIN_LIBRARY_PATH: %v", err)
	}
	if _, err := Find(filepath.Join(dir, "nope.so")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing path: %v", err)
	}
	if _, err := Find(dir + "/"); err == nil {
		t.Error("a directory was taken for a plugin")
	}
}
