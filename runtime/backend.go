package runtime

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego" // the pure-Go backend is always compiled in.

	_ "stx.dev/stx/runtime/cpu" // stx's own CPU backend ("cpu"): OpenBLAS GEMM when available.
	"stx.dev/stx/runtime/cpu/blas"
	"stx.dev/stx/runtime/xlaplugin"
)

// SimpleGoSpec is how stx runs GoMLX's pure-Go backend: graph nodes executed one after another
// (matmuls still split across the worker pool). SimpleGo's default can deadlock (matmul tasks
// wait for pool slots held by the nodes that spawned them). "parallelism=-1" avoids the deadlock
// and ran ~15 % faster here, but its parallel node executor has a data race in v0.26.0 (go test
// -race: exec.go reads numUsed without the lock that guards its increments), which decides
// whether a node may overwrite an input buffer in place; so stx does not use it by default.
const SimpleGoSpec = "go:ops_sequential"

// DefaultBackendSpec is the backend used when neither a flag nor $GOMLX_BACKEND names one: stx's
// own "cpu" backend when OpenBLAS can be loaded (it is several times faster than SimpleGo), else
// SimpleGo (the cpu backend's pure-Go GEMM is slower than SimpleGo's).
func DefaultBackendSpec() string {
	if blas.Available() {
		return "cpu"
	}
	return SimpleGoSpec
}

// stdoutMu serialises the stdout redirection of NewBackend.
var stdoutMu sync.Mutex

// Backend is a GoMLX backend together with the spec that chose it, for reporting.
type Backend struct {
	backends.Backend
	// Spec is the normalised "<name>:<config>" string the backend was created from.
	Spec string
	// Source says where the spec came from: "default", "flag" or "$GOMLX_BACKEND".
	Source string
	// Plugin is the PJRT plugin of an xla backend (nil for the others).
	Plugin *xlaplugin.Plugin
}

// Describe returns a one-line description of the backend and its device, printed at start.
func (b *Backend) Describe() string {
	if p := b.Plugin; p != nil {
		wrapped := ""
		if p.Wrapped {
			wrapped = ", newer than go-xla's PJRT 0.83: arguments zero-padded"
		}
		return fmt.Sprintf("backend xla (%s, from %s), %d device(s): PJRT plugin %s (PJRT C API %d.%d%s)",
			b.Spec, b.Source, b.NumDevices(), p.Path, p.Major, p.Minor, wrapped)
	}
	return fmt.Sprintf("backend %s (%s, from %s), %d device(s): %s",
		b.Name(), b.Spec, b.Source, b.NumDevices(), b.Description())
}

// NormalizeBackendSpec turns a user's backend choice into a GoMLX configuration string.
// Accepted forms: "" (DefaultBackendSpec), "go" (SimpleGo), "go:<options>", "cpu" or
// "cpu:<options>" (stx's own CPU backend, package runtime/cpu), "xla" (the first installed
// PJRT plugin), "xla:<plugin>[,<option>...]" (a plugin name such as "cuda" or "cpu", searched
// in $PJRT_PLUGIN_LIBRARY_PATH, stx's plugin directory and the standard places, or a path to
// the plugin, which is made absolute; options: devices=N, shared_buffers, noshared_buffers,
// tf32), or a bare path to a PJRT plugin ("./pjrt_c_api_cuda_plugin.so").
func NormalizeBackendSpec(spec string) (string, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return DefaultBackendSpec(), nil
	case spec == "go" || spec == "simplego":
		return SimpleGoSpec, nil
	case strings.HasPrefix(spec, "go:") || strings.HasPrefix(spec, "simplego:"):
		_, cfg, _ := strings.Cut(spec, ":")
		if !strings.Contains(cfg, "parallelism") && !strings.Contains(cfg, "ops_sequential") {
			cfg = strings.Trim("ops_sequential,"+cfg, ",")
		}
		return "go:" + cfg, nil
	case spec == "cpu" || spec == "cpu:":
		return "cpu", nil
	case strings.HasPrefix(spec, "cpu:"):
		// Options are checked by the backend's constructor.
		return spec, nil
	case spec == "xla":
		// The first installed plugin (cuda where an NVIDIA device exists, else cpu); never
		// downloaded.
		return "xla", nil
	case strings.HasPrefix(spec, "xla:"):
		plugin, opts, _ := strings.Cut(strings.TrimPrefix(spec, "xla:"), ",")
		if plugin == "" {
			return "", fmt.Errorf("backend %q: empty PJRT plugin name", spec)
		}
		if strings.ContainsRune(plugin, os.PathSeparator) || strings.HasSuffix(plugin, ".so") {
			abs, err := xlaplugin.Find(plugin)
			if err != nil {
				return "", fmt.Errorf("backend %q: %w", spec, err)
			}
			plugin = abs
		}
		if opts != "" {
			plugin += "," + opts
		}
		return "xla:" + plugin, nil
	case strings.HasSuffix(spec, ".so") || strings.ContainsRune(spec, os.PathSeparator):
		abs, err := xlaplugin.Find(spec)
		if err != nil {
			return "", fmt.Errorf("backend %q: %w", spec, err)
		}
		return "xla:" + abs, nil
	}
	return "", fmt.Errorf("unknown backend %q: use \"go\", \"cpu\", \"xla:<plugin>\" or a path to a PJRT plugin", spec)
}

// NewBackend creates the backend named by spec (a --backend flag value); an empty spec falls
// back to $GOMLX_BACKEND and then to DefaultBackendSpec (cpu with OpenBLAS, else SimpleGo). It
// never downloads anything: PJRT plugin auto-installation is disabled, and a missing plugin or
// a backend not compiled into this binary is returned as an error.
func NewBackend(spec string) (b *Backend, err error) {
	source := "flag"
	if strings.TrimSpace(spec) == "" {
		if env, ok := os.LookupEnv(backends.ConfigEnvVar); ok && strings.TrimSpace(env) != "" {
			spec, source = env, "$"+backends.ConfigEnvVar
		} else {
			source = "default"
		}
	}
	norm, err := NormalizeBackendSpec(spec)
	if err != nil {
		return nil, err
	}
	name, _, _ := strings.Cut(norm, ":")
	if name == "xla" && !xlaCompiledIn {
		return nil, fmt.Errorf("backend %q: this binary was built without XLA support (-tags noxla or no cgo); rebuild with cgo enabled", norm)
	}
	disableXLAAutoInstall()
	// GoMLX reports some configuration errors by panicking; turn them into errors.
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("backend %q: %v", norm, r)
		}
	}()
	if name == "go" && strings.Contains(norm, "parallelism") {
		// SimpleGo announces a parallelism setting on stdout; keep stdout for the command's
		// output (JSON lines). Backends are created at start, before any output; the lock
		// keeps concurrent NewBackend calls from restoring each other's stdout.
		stdoutMu.Lock()
		defer stdoutMu.Unlock()
		if devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			saved := os.Stdout
			os.Stdout = devnull
			defer func() { os.Stdout = saved; devnull.Close() }()
		}
	}
	var be backends.Backend
	var plugin *xlaplugin.Plugin
	if name == "xla" {
		be, plugin, err = newXLA(norm)
	} else {
		be, err = backends.NewWithConfig(norm)
	}
	if err != nil {
		return nil, fmt.Errorf("backend %q: %w", norm, err)
	}
	return &Backend{Backend: be, Spec: norm, Source: source, Plugin: plugin}, nil
}

// EnvBackendKind is the kind of backend ("cpu", "go" or "xla") that NewBackend("") would
// create from the environment ($STX_BACKEND, else $GOMLX_BACKEND, else the default), without
// creating it: tests that must know which pass they run in (CI runs the suites on each kind)
// ask it. An invalid spec gives "".
func EnvBackendKind() string {
	spec := os.Getenv("STX_BACKEND")
	if spec == "" {
		spec = os.Getenv(backends.ConfigEnvVar)
	}
	s, err := NormalizeBackendSpec(spec)
	if err != nil {
		return ""
	}
	kind, _, _ := strings.Cut(s, ":")
	return kind
}
