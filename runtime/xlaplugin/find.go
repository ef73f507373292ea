// Package xlaplugin finds, checks and loads the PJRT plugins behind stx's xla backend.
//
// A PJRT plugin is a shared library exporting GetPjrtApi: XLA's CPU plugin (from the Python
// package index: scripts/fetch-pjrt.sh) or the CUDA plugin of jax-cuda13-pjrt. stx loads it
// itself instead of leaving that to go-xla, for three reasons:
//   - the version is checked before anything runs: a plugin outside the PJRT C API minor
//     versions stx was tested with is refused, naming its version and the supported range;
//   - plugins newer than go-xla's C header (PJRT 0.83) are wrapped so that every argument
//     struct reaches them zero-padded past the size go-xla knows (compat.c): a field the plugin
//     added since reads as zero, its documented default;
//   - "xla:cpu" also finds the plugins fetch-pjrt.sh installs under stx's cache, and a missing
//     plugin is an error that says where stx looked and how to get one, never a download.
package xlaplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Dir is where scripts/fetch-pjrt.sh installs plugins and where "xla:<name>" looks after
// $PJRT_PLUGIN_LIBRARY_PATH: $STX_PJRT_DIR, else $STX_CACHE_DIR/pjrt, else the user's cache
// directory + "/stx/pjrt".
func Dir() (string, error) {
	if d := os.Getenv("STX_PJRT_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("STX_CACHE_DIR"); d != "" {
		return filepath.Join(d, "pjrt"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for PJRT plugins (set STX_PJRT_DIR): %w", err)
	}
	return filepath.Join(d, "stx", "pjrt"), nil
}

// Fetched lists the CPU plugins fetch-pjrt.sh installed: Dir()/<package>-<version>/
// pjrt_c_api_cpu_plugin.so, sorted by directory name. Tests run on each of them.
func Fetched() []string {
	dir, err := Dir()
	if err != nil {
		return nil
	}
	found, _ := filepath.Glob(filepath.Join(dir, "*", "pjrt_c_api_cpu_plugin.so"))
	slices.Sort(found)
	return found
}

// FetchHint says how to get XLA's CPU plugin; errors about a missing plugin end with it.
const FetchHint = "scripts/fetch-pjrt.sh installs XLA's CPU plugins from the Python package index " +
	"(or: pip download --no-deps xla-cpu-pjrt==0.0.1 and unzip its xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so); " +
	"on GPUs, pass the CUDA plugin's path (jax-cuda13-pjrt: site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so)"

// searchDirs are the directories "xla:<name>" searches, in order: $PJRT_PLUGIN_LIBRARY_PATH
// alone when it is set (as go-xla does), else stx's plugin directory, then go-xla's standard
// places and $LD_LIBRARY_PATH.
func searchDirs() []string {
	if env := os.Getenv("PJRT_PLUGIN_LIBRARY_PATH"); env != "" {
		return filepath.SplitList(env)
	}
	var dirs []string
	if d, err := Dir(); err == nil {
		dirs = append(dirs, d)
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local", "lib", "go-xla"), filepath.Join(home, ".local", "lib", "go-xla", "nvidia"))
	}
	dirs = append(dirs, "/usr/local/lib/go-xla", "/usr/local/lib/go-xla/nvidia")
	dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	return slices.DeleteFunc(dirs, func(d string) bool { return d == "" })
}

// Find resolves a plugin name ("cpu", "cuda") to the absolute path of its shared library,
// named pjrt_c_api_<name>_plugin.so, pjrt_plugin_<name>.so or pjrt-plugin-<name>.so in the
// search directories. A name containing a path separator or ending in .so is a path.
func Find(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty PJRT plugin name")
	}
	if strings.ContainsRune(name, os.PathSeparator) || strings.HasSuffix(name, ".so") {
		return checkFile(name)
	}
	dirs := searchDirs()
	for _, d := range dirs {
		for _, file := range []string{"pjrt_c_api_" + name + "_plugin.so", "pjrt_plugin_" + name + ".so", "pjrt-plugin-" + name + ".so"} {
			p := filepath.Join(d, file)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				// Through links (fetch-pjrt.sh's default is one), so that messages name the
				// plugin's own versioned directory.
				if real, err := filepath.EvalSymlinks(p); err == nil {
					p = real
				}
				return filepath.Abs(p)
			}
		}
	}
	return "", fmt.Errorf("PJRT plugin %q not found: looked for pjrt_c_api_%s_plugin.so in %s; %s",
		name, name, strings.Join(dirs, ", "), FetchHint)
}

func checkFile(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("resolving PJRT plugin path: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("PJRT plugin %s does not exist; %s", abs, FetchHint)
		}
		return "", fmt.Errorf("PJRT plugin: %w", err)
	}
	if st.IsDir() {
		return "", fmt.Errorf("PJRT plugin %s is a directory, not a shared library", abs)
	}
	return abs, nil
}
