//go:build ((linux && amd64) || darwin) && !noxla && cgo

package xlaplugin

/*
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include "compat.h"
#include "kv.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// The PJRT C API minor versions stx supports: 0.81 (xla-cpu-pjrt 0.0.1) through 0.115 (XLA
// from jax 0.11.2: lammps-jax-pjrt-cpu and jax-cuda13-pjrt 0.11.2), the plugins CI and the GPU
// check run. Outside it a plugin may lack a function go-xla calls (older) or change what a
// zero field means (newer), so it is refused rather than tried.
const (
	SupportedMajor    = 0
	MinSupportedMinor = 81
	MaxSupportedMinor = 115
)

// The C header go-xla v0.1.4 is compiled against: PJRT 0.83, whose PJRT_Api has 120 function
// slots; PJRT_LoadedExecutable_Execute is slot 55 and its PJRT_ExecuteOptions* sits at offset
// 24 of its argument struct (both fixed: the API only appends).
const (
	headerMinor    = 83
	headerSlots    = 120
	executeSlot    = 55
	optionsOffset  = 24
	argPaddingSize = 256 // bytes of zeros past a struct's known end; structs grow by a few fields per version
)

// Plugin is a loaded PJRT plugin.
type Plugin struct {
	// Path is the shared library's absolute path; go-xla knows the plugin by this name.
	Path string
	// Major and Minor are the PJRT C API version the plugin was built with.
	Major, Minor int
	// Wrapped says whether calls go through the zero-padding wrapper (plugins newer than
	// go-xla's header).
	Wrapped bool
}

// Version is "0.115"-style.
func (p *Plugin) Version() string { return fmt.Sprintf("%d.%d", p.Major, p.Minor) }

// Supported is the range of PJRT versions stx loads, for messages.
func Supported() string {
	return fmt.Sprintf("%d.%d to %d.%d", SupportedMajor, MinSupportedMinor, SupportedMajor, MaxSupportedMinor)
}

var (
	mu     sync.Mutex
	loaded = map[string]*Plugin{}
)

// Load opens the plugin at path (absolute), checks its PJRT version, wraps it when it is newer
// than go-xla's header, and registers it with go-xla under its path. Loading the same path
// again returns the same plugin.
func Load(path string) (*Plugin, error) {
	mu.Lock()
	defer mu.Unlock()
	if p, ok := loaded[path]; ok {
		return p, nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var info C.stx_plugin_info
	C.stx_plugin_open(cpath, &info)
	if info.api == nil {
		return nil, fmt.Errorf("loading PJRT plugin %s: %s", path, C.GoString(&info.err[0]))
	}
	p := &Plugin{Path: path, Major: int(info.major), Minor: int(info.minor)}
	if err := check(p); err != nil {
		return nil, err
	}
	api := info.api
	if p.Minor > headerMinor {
		wrapped := C.stx_plugin_wrap(info.api, info.struct_size, headerSlots, argPaddingSize, executeSlot, optionsOffset)
		if wrapped == nil {
			return nil, fmt.Errorf("PJRT plugin %s (PJRT %s): cannot wrap its API table of %d bytes (at most %d newer plugins per process)",
				path, p.Version(), info.struct_size, C.STX_MAX_WRAPPED)
		}
		api, p.Wrapped = wrapped, true
	}
	// Every plugin's PJRT_Client_Create goes through the key-value hook (kv.c), which does
	// nothing unless SetCluster made this process a node of a group: a plugin loaded before
	// (by a placement check) must still join when the run creates its client.
	hooked := hook(api, info.struct_size)
	if hooked == nil {
		return nil, fmt.Errorf("PJRT plugin %s (PJRT %s): cannot hook its API table of %d bytes (at most %d plugins per process)",
			path, p.Version(), info.struct_size, C.STX_MAX_HOOKED)
	}
	if err := pjrt.RegisterPreloadedPlugin(path, uintptr(hooked)); err != nil {
		return nil, fmt.Errorf("initializing PJRT plugin %s (PJRT %s): %w", path, p.Version(), err)
	}
	loaded[path] = p
	return p, nil
}

func check(p *Plugin) error {
	if p.Major != SupportedMajor || p.Minor < MinSupportedMinor || p.Minor > MaxSupportedMinor {
		return fmt.Errorf("PJRT plugin %s implements PJRT C API %s; stx supports %s", p.Path, p.Version(), Supported())
	}
	return nil
}

// WrappedCalls counts the plugin calls that went through the zero-padding wrapper in this
// process; tests use it to see that the wrapper is in the path.
func WrappedCalls() int64 { return int64(C.stx_plugin_calls()) }
