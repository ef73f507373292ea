package cpu

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
)

// Virtual devices.
//
// The backend can present N devices ("cpu:devices=N", like XLA's
// --xla_force_host_platform_device_count) so that multi-device code — GoMLX's SPMD strategy with
// its collectives, device placement, copies between devices — runs and is tested on a machine
// without accelerators. The devices share the host's memory and cores: a buffer records the
// device it belongs to (GoMLX keeps track of where tensors live and copies between devices
// through BufferCopyToDevice), and an SPMD program runs as one goroutine per replica, meeting
// the others at each collective (collective.go). It computes what N real devices would, not
// faster: the replicas share the same cores.

// MaxDevices bounds "devices=N": a replica is a goroutine with its own activations, so a large
// N only multiplies memory.
const MaxDevices = 64

// parseConfig reads the backend's configuration string: "" or a comma-separated list of
// options, of which there is one, "devices=N" (1 ≤ N ≤ MaxDevices). It returns the device count.
func parseConfig(config string) (devices int, err error) {
	devices = 1
	for _, opt := range strings.Split(config, ",") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		key, val, ok := strings.Cut(opt, "=")
		if !ok || strings.TrimSpace(key) != "devices" {
			return 0, fmt.Errorf("cpu backend: unknown configuration %q (the cpu backend takes one option, devices=N)", opt)
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || n < 1 || n > MaxDevices {
			return 0, fmt.Errorf("cpu backend: devices=%s: want a whole number from 1 to %d", strings.TrimSpace(val), MaxDevices)
		}
		devices = n
	}
	return devices, nil
}

// checkDevice reports an error unless d is one of the backend's devices.
func (b *Backend) checkDevice(d backends.DeviceNum) error {
	if d < 0 || int(d) >= b.NumDevices() {
		return fmt.Errorf("cpu backend has %d device(s), got device %d", b.NumDevices(), d)
	}
	return nil
}

// copyToDevice copies source into a new buffer on device d.
func (b *Backend) copyToDevice(source backends.Buffer, d backends.DeviceNum) (backends.Buffer, error) {
	src, err := b.checkBuffer(source)
	if err != nil {
		return nil, fmt.Errorf("BufferCopyToDevice: %w", err)
	}
	if err := b.checkDevice(d); err != nil {
		return nil, fmt.Errorf("BufferCopyToDevice: %w", err)
	}
	dst := b.pool.newHeapBuffer(src.shape)
	dst.device = d
	copyFlat(dst.flat, src.flat)
	return dst, nil
}

// distribution is how a computation is spread over devices.
type distribution struct {
	// replicas is the number of SPMD copies of the program (0 or 1: a single-device program).
	replicas int
	// assignment are the devices of the replicas (replica i runs on assignment[i]); nil: a
	// portable single-device program, or replica i on device i.
	assignment []backends.DeviceNum
}

// count is the number of replicas, at least 1.
func (d distribution) count() int { return max(1, d.replicas) }

// device is the device replica i runs on.
func (d distribution) device(i int, defaultDevice backends.DeviceNum) backends.DeviceNum {
	switch {
	case i < len(d.assignment):
		return d.assignment[i]
	case d.count() > 1:
		return backends.DeviceNum(i)
	}
	return defaultDevice
}

func (b *Builder) setSPMD(n int) error {
	if b.compiled || len(b.nodes) > 0 {
		return fmt.Errorf("cpu backend: DistributedSPMD(%d) must come before the graph's first op", n)
	}
	if n < 1 || n > b.backend.NumDevices() {
		return fmt.Errorf("cpu backend: DistributedSPMD(%d): the backend has %d device(s) (configure more with \"cpu:devices=N\")",
			n, b.backend.NumDevices())
	}
	b.dist.replicas = n
	return nil
}

func (b *Builder) setDeviceAssignment(devices []backends.DeviceNum) error {
	if b.compiled {
		return fmt.Errorf("cpu backend: DeviceAssignment after Compile")
	}
	if len(devices) != b.dist.count() {
		return fmt.Errorf("cpu backend: device assignment %v: %d device(s) for %d replica(s)", devices, len(devices), b.dist.count())
	}
	seen := make(map[backends.DeviceNum]bool, len(devices))
	for _, d := range devices {
		if err := b.backend.checkDevice(d); err != nil {
			return fmt.Errorf("cpu backend: device assignment %v: %w", devices, err)
		}
		if seen[d] {
			return fmt.Errorf("cpu backend: device assignment %v: device %d twice", devices, d)
		}
		seen[d] = true
	}
	b.dist.assignment = append([]backends.DeviceNum(nil), devices...)
	return nil
}

// Execute runs the computation. A single-device program runs on its assigned device, or on
// defaultDevice when portable. An SPMD program takes the inputs of every replica, device-major
// ([replica 0's inputs..., replica 1's inputs...]), runs the replicas concurrently and returns
// their outputs in the same order. If one replica fails, the others are released from any
// collective they wait in and the first failure is returned.
func (e *Executable) Execute(inputs []backends.Buffer, donate []bool, defaultDevice backends.DeviceNum) ([]backends.Buffer, error) {
	n := e.dist.count()
	if n == 1 {
		dev := e.dist.device(0, defaultDevice)
		if err := e.backend.checkDevice(dev); err != nil {
			return nil, fmt.Errorf("cpu backend Execute %q: %w", e.name, err)
		}
		outs, err := e.execute(inputs, donate, replica{})
		setDevice(outs, dev)
		return outs, err
	}
	p := len(e.params)
	if len(inputs) != n*p {
		return nil, fmt.Errorf("cpu backend Execute %q: %d inputs given, %d replicas × %d parameters expected", e.name, len(inputs), n, p)
	}
	if donate != nil && len(donate) != len(inputs) {
		return nil, fmt.Errorf("cpu backend Execute %q: %d donate flags for %d inputs", e.name, len(donate), len(inputs))
	}
	run := newCollectiveRun(n)
	outs := make([][]backends.Buffer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var don []bool
			if donate != nil {
				don = donate[i*p : (i+1)*p]
			}
			outs[i], errs[i] = e.execute(inputs[i*p:(i+1)*p], don, replica{index: i, count: n, run: run})
			if errs[i] != nil {
				run.abort(fmt.Errorf("replica %d: %w", i, errs[i]))
				return
			}
			setDevice(outs[i], e.dist.device(i, 0))
		}()
	}
	wg.Wait()
	if err := run.failure(); err != nil {
		return nil, fmt.Errorf("cpu backend Execute %q: %w", e.name, err)
	}
	all := make([]backends.Buffer, 0, n*len(e.outputs))
	for _, o := range outs {
		all = append(all, o...)
	}
	return all, nil
}

func setDevice(outs []backends.Buffer, d backends.DeviceNum) {
	for _, o := range outs {
		o.(*Buffer).device = d
	}
}

// GoMLX v0.26 places a graph on a device other than 0 only as a distributed (SPMD) program,
// and an SPMD program pins every variable it reads to its mesh, so that the same weights can
// no longer be read by a program on another mesh (a trainer on devices [1 2] and its forward
// passes on device 1). stx places a one-device program instead by naming it: a graph whose
// name ends in PlacedName's tag runs on that device, and the backends (this one and the xla
// backend's wrapper) read the tag when they build it.
const placedTag = "@device:"

// PlacedName is name tagged to run on device d.
func PlacedName(name string, d backends.DeviceNum) string {
	return fmt.Sprintf("%s%s%d", name, placedTag, d)
}

// PlacedDevice reads the device a graph name was tagged with by PlacedName. GoMLX appends
// "#<n>" (its graph cache's count) to an executor's name.
func PlacedDevice(graphName string) (backends.DeviceNum, bool) {
	i := strings.LastIndex(graphName, placedTag)
	if i < 0 {
		return 0, false
	}
	digits, _, _ := strings.Cut(graphName[i+len(placedTag):], "#")
	d, err := strconv.Atoi(digits)
	if err != nil || d < 0 {
		return 0, false
	}
	return backends.DeviceNum(d), true
}
