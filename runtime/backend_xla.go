//go:build ((linux && amd64) || darwin) && !noxla && cgo

package runtime

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"stx.dev/stx/runtime/cpu"
	"stx.dev/stx/runtime/xlaplugin"
)

// xlaCompiledIn says whether the XLA (PJRT) backend is linked into this binary.
const xlaCompiledIn = true

// disableXLAAutoInstall stops go-xla from downloading PJRT plugins from the network: stx
// only uses plugins the user configured.
func disableXLAAutoInstall() {
	_ = os.Setenv(xla.NoAutoInstallEnv, "1")
	xla.EnableAutoInstall(false)
}

// newXLA creates an xla backend from a normalised spec "xla" or "xla:<plugin>[,<option>...]".
// stx finds and loads the plugin itself (xlaplugin: version check, compatibility wrapper),
// then hands go-xla its absolute path. Options: devices=N (the CPU plugin's device count,
// like XLA_FLAGS=--xla_force_host_platform_device_count=N), and GoMLX's own shared_buffers,
// noshared_buffers and tf32.
func newXLA(spec string) (backends.Backend, *xlaplugin.Plugin, error) {
	rest := strings.TrimPrefix(strings.TrimPrefix(spec, "xla"), ":")
	name, optList, _ := strings.Cut(rest, ",")
	if name == "" {
		name = "cpu"
		if nvidia, _ := filepath.Glob("/dev/nvidia[0-9]*"); len(nvidia) > 0 {
			if _, err := xlaplugin.Find("cuda"); err == nil {
				name = "cuda"
			}
		}
	}
	path, err := xlaplugin.Find(name)
	if err != nil {
		return nil, nil, err
	}
	options := pjrt.NamedValuesMap{}
	var gomlxOpts []string
	for _, o := range strings.Split(optList, ",") {
		switch key, val, _ := strings.Cut(o, "="); key {
		case "":
		case "devices":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return nil, nil, fmt.Errorf("option %q: want devices=N with N ≥ 1", o)
			}
			// XLA's CPU plugin reads its device count from this client option.
			options["cpu_device_count"] = int64(n)
		case "shared_buffers", "noshared_buffers", "tf32":
			gomlxOpts = append(gomlxOpts, key)
		default:
			return nil, nil, fmt.Errorf("unknown option %q: the xla backend takes devices=N, shared_buffers, noshared_buffers, tf32", o)
		}
	}
	if _, set := options["cpu_device_count"]; !set && isCPUPlugin(path) {
		// One device unless asked, as on the cpu backend (the plugin's own default is a few);
		// XLA_FLAGS=--xla_force_host_platform_device_count=N is honoured as jax honours it
		// (the plugin itself reads only its client option).
		options["cpu_device_count"] = int64(max(1, forcedHostDevices(os.Getenv("XLA_FLAGS"))))
	}
	// A node of a group of processes (stx run --nodes) tells the plugin its place; a plugin
	// that cannot join processes is refused rather than making a client of this process alone.
	nodeOptions, err := xlaplugin.ClusterOptions(path)
	if err != nil {
		return nil, nil, err
	}
	maps.Copy(options, nodeOptions)
	exactLowPrecision()
	plugin, err := xlaplugin.Load(path)
	if err != nil {
		return nil, nil, err
	}
	config := strings.Join(append([]string{path}, gomlxOpts...), ",")
	be, err := xla.NewWithOptions(config, options)
	if err != nil {
		return nil, nil, fmt.Errorf("PJRT plugin %s (PJRT %s): %w", path, plugin.Version(), err)
	}
	return placingBackend{be}, plugin, nil
}

// excessPrecisionFlag is the XLA flag that lets XLA's compilers skip roundings to a lower
// precision (true by default): with it, XLA fuses a bfloat16 product and the conversion of its
// result to float32 and drops the rounding (measured on the CPU plugin: weight gradients of
// bfloat16 products came out unrounded), so a model computing in bfloat16 (Model.ComputeDType)
// would compute other numbers than its sampler and than the cpu backend, unlike PyTorch's
// autocast. It changes nothing for float32 graphs.
const excessPrecisionFlag = "--xla_allow_excess_precision"

// exactLowPrecision adds excessPrecisionFlag=false to XLA_FLAGS unless the user set the flag:
// XLA reads XLA_FLAGS once, when the first plugin is loaded.
func exactLowPrecision() {
	_ = os.Setenv("XLA_FLAGS", withExactLowPrecision(os.Getenv("XLA_FLAGS")))
}

// withExactLowPrecision returns XLA_FLAGS flags with excessPrecisionFlag=false added, unless
// they set it.
func withExactLowPrecision(flags string) string {
	if strings.Contains(flags, excessPrecisionFlag) {
		return flags
	}
	return strings.TrimSpace(flags + " " + excessPrecisionFlag + "=false")
}

// isCPUPlugin says whether a plugin file is XLA's CPU plugin, by its name: the client option
// that sets the device count is the CPU plugin's (the GPU plugin refuses unknown options).
func isCPUPlugin(path string) bool {
	return strings.Contains(strings.ToLower(filepath.Base(path)), "cpu")
}

// forcedHostDevices reads --xla_force_host_platform_device_count=N from XLA_FLAGS (0 if absent).
func forcedHostDevices(flags string) int {
	n := 0
	for _, f := range strings.Fields(flags) {
		if v, ok := strings.CutPrefix(strings.TrimLeft(f, "-"), "xla_force_host_platform_device_count="); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return n
}

// placingBackend is the xla backend with two repairs of GoMLX v0.26's distributed graphs,
// which stx's placement uses (data-parallel trainers, roles and samplers on one device other
// than 0):
//   - In an SPMD program every device runs the same program on its own shard, yet GoMLX passes
//     each parameter and output a (replicated) sharding spec, which the xla builder takes as
//     Shardy annotations and refuses ("mesh not found": SPMD declares no Shardy mesh). Under
//     SPMD the builder drops them, which is what SPMD means: the shapes are the shards', and
//     the all-reduces are explicit.
//   - A one-device program placed on device d (named by cpu.PlacedName) is assigned to d, and
//     its arguments, which GoMLX converts for the default device 0 (PJRT refuses those: "Buffer
//     passed to Execute() ... is on device cpu:0, but replica is assigned to device cpu:2"),
//     are copied to d, device to device.
type placingBackend struct{ backends.Backend }

func (b placingBackend) Builder(name string) backends.Builder {
	builder := &placingBuilder{Builder: b.Backend.Builder(name), backend: b.Backend}
	if d, ok := cpu.PlacedDevice(name); ok {
		// A one-device program placed on d (cpu.PlacedName); an invalid device fails at the
		// first op, as GoMLX reports builder errors.
		if err := builder.DeviceAssignment(d); err != nil {
			builder.err = err
		}
	}
	return builder
}

type placingBuilder struct {
	backends.Builder
	backend backends.Backend
	spmd    bool
	devices []backends.DeviceNum
	err     error
}

func (b *placingBuilder) DistributedSPMD(numDevices int) error {
	if err := b.Builder.DistributedSPMD(numDevices); err != nil {
		return err
	}
	b.spmd = true
	return nil
}

func (b *placingBuilder) DeviceAssignment(devices ...backends.DeviceNum) error {
	if err := b.Builder.DeviceAssignment(devices...); err != nil {
		return err
	}
	b.devices = devices
	return nil
}

func (b *placingBuilder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (backends.Op, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.spmd {
		sharding = nil
	}
	return b.Builder.Parameter(name, shape, sharding)
}

func (b *placingBuilder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	if b.spmd {
		shardings = nil
	}
	exe, err := b.Builder.Compile(outputs, shardings)
	if err != nil || len(b.devices) != 1 {
		return exe, err
	}
	return &placedExecutable{Executable: exe, backend: b.backend, device: b.devices[0]}, nil
}

// placedExecutable is a one-device program assigned to device; see placingBackend.
type placedExecutable struct {
	backends.Executable
	backend backends.Backend
	device  backends.DeviceNum
}

func (e *placedExecutable) Execute(inputs []backends.Buffer, donate []bool, defaultDevice backends.DeviceNum) ([]backends.Buffer, error) {
	var moved []backends.Buffer
	defer func() {
		for _, buf := range moved {
			_ = e.backend.BufferFinalize(buf)
		}
	}()
	copied := false
	for i, buf := range inputs {
		d, err := e.backend.BufferDeviceNum(buf)
		if err != nil || d == e.device {
			continue
		}
		on, err := e.backend.BufferCopyToDevice(buf, e.device)
		if err != nil {
			return nil, fmt.Errorf("moving argument %d from device %d to device %d: %w", i, d, e.device, err)
		}
		if !copied { // the caller's slices stay as they were
			inputs, donate, copied = slices.Clone(inputs), slices.Clone(donate), true
		}
		if i < len(donate) && donate[i] {
			// The caller gave the original up; the copy takes its place.
			_ = e.backend.BufferFinalize(buf)
			donate[i] = false
		}
		inputs[i] = on
		moved = append(moved, on)
	}
	return e.Executable.Execute(inputs, donate, e.device)
}
