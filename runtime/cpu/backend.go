package cpu

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"

	"stx.dev/stx/runtime/cpu/blas"
)

// BackendName is the name the backend is registered under ("cpu", selected with
// GOMLX_BACKEND=cpu or the config string "cpu").
const BackendName = "cpu"

func init() {
	backends.Register(BackendName, New)
}

// Backend is stx's CPU backend. It is safe for concurrent use.
type Backend struct {
	pool      bufferPool
	finalized atomic.Bool
	devices   int // virtual devices (config "devices=N"); see devices.go
	// noFuse turns off broadcast fusion (fuse.go), for the tests that compare both programs.
	noFuse bool
	// pairing says when independent products run side by side (pair.go).
	pairing pairMode
}

var _ backends.Backend = (*Backend)(nil)

// New creates a cpu backend. The config string takes one option, "devices=N" (see devices.go);
// anything else is an error, so a typo is not silently ignored.
func New(config string) (backends.Backend, error) {
	devices, err := parseConfig(config)
	if err != nil {
		return nil, err
	}
	return &Backend{devices: devices}, nil
}

// Name returns "cpu".
func (b *Backend) Name() string { return BackendName }

// String returns the backend's name.
func (b *Backend) String() string { return BackendName }

// Description names the matrix-multiply implementation in use.
func (b *Backend) Description() string {
	return fmt.Sprintf("stx cpu backend (GEMM: %s; %d cores)", blas.Name(), runtime.GOMAXPROCS(0))
}

// NumDevices returns the number of virtual devices (1 unless configured with "devices=N").
func (b *Backend) NumDevices() int { return max(1, b.devices) }

// DeviceDescription describes the single device.
func (b *Backend) DeviceDescription(deviceNum backends.DeviceNum) string {
	return fmt.Sprintf("cpu:%d (%d cores)", deviceNum, runtime.GOMAXPROCS(0))
}

// Capabilities lists the ops and dtypes the backend implements.
func (b *Backend) Capabilities() backends.Capabilities {
	return capabilities.Clone()
}

// Builder starts a new computation graph.
func (b *Backend) Builder(name string) backends.Builder {
	return newBuilder(b, name)
}

// Finalize marks the backend finalized and returns the pooled storage; buffers still held are
// reclaimed when the garbage collector finds them unreachable.
func (b *Backend) Finalize() {
	b.finalized.Store(true)
	b.pool.drain()
}

// IsFinalized reports whether Finalize was called.
func (b *Backend) IsFinalized() bool { return b.finalized.Load() }
