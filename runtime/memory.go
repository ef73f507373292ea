package runtime

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"
)

// The machine's memory, probed where models are read or built (never while parsing a
// config): the limit a model's weights must fit, and what is available now.

// CheckMachineMemory refuses a model whose float32 weights alone would not fit in this
// process's memory (MemoryLimit), before anything is allocated for it.
func (c Config) CheckMachineMemory() error {
	limit, what := memoryLimit()
	return c.checkMemory(limit, what)
}

// checkMemory refuses a model whose float32 weights need more than limit bytes, the memory
// that what names.
func (c Config) checkMemory(limit uint64, what string) error {
	need := uint64(c.NumParams()) * 4
	if need > limit {
		return fmt.Errorf("model config: %d parameters need %.1f GiB as float32, more than the %.1f GiB of %s",
			c.NumParams(), float64(need)/(1<<30), float64(limit)/(1<<30), what)
	}
	return nil
}

// MemoryLimit returns the memory available to this process, in bytes: the smaller of the
// machine's physical memory and the cgroup's limit, or 1 TiB where neither can be read.
func MemoryLimit() uint64 {
	limit, _ := memoryLimit()
	return limit
}

// MemoryAvailable returns the memory the kernel reports available now (MemAvailable in
// /proc/meminfo: free memory plus what it can reclaim), or 0 where it cannot be read.
func MemoryAvailable() uint64 {
	kb, _ := procKB("/proc/meminfo", "MemAvailable:")
	return kb << 10
}

// procKB reads the kB figure of the line starting with key in a /proc file such as
// /proc/meminfo or /proc/self/status; ok is false where the file or the line is missing.
func procKB(path, key string) (kb uint64, ok bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}

// memoryLimit returns the memory available to this process: the smaller of the machine's
// physical memory and the cgroup's limit, or 1 TiB where neither can be read.
func memoryLimit() (uint64, string) {
	limit, what := uint64(1)<<40, "the default limit"
	if kb, ok := procKB("/proc/meminfo", "MemTotal:"); ok {
		limit, what = kb<<10, "this machine's memory"
	}
	if raw, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if b, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64); err == nil && b < limit {
			limit, what = b, "this process's cgroup memory limit"
		}
	}
	return limit, what
}

// idleShare: memory left idle at a phase boundary is returned to the system only when it is at
// least 1/idleShare of the process's memory limit (MemoryLimit): less costs the machine little,
// and keeping it saves mapping and faulting it in again at its next use.
const idleShare = 16

// worthReleasing says whether bytes of idle memory are worth returning to the system now.
func worthReleasing(bytes int64) bool {
	return bytes > 0 && uint64(bytes) >= MemoryLimit()/idleShare
}

// poolReleaser is a backend that keeps storage for reuse between executions and can return it
// (runtime/cpu).
type poolReleaser interface {
	PooledBytes() int
	ReleasePooled() int
}

// ReleaseIdle returns the storage the backend keeps for reuse between executions (the cpu
// backend's pool: the last train step's activations, kept for the next step) to the system
// when it is worth it (worthReleasing): for the phases of a rollout that run no large program
// (host sampling, evaluation, a checkpoint's writing), which would otherwise hold it resident
// beside their own memory. It returns the bytes released.
func (b *Backend) ReleaseIdle() int64 {
	var inner backends.Backend = b
	for {
		if r, ok := inner.(poolReleaser); ok {
			if !worthReleasing(int64(r.PooledBytes())) {
				return 0
			}
			return int64(r.ReleasePooled())
		}
		w, ok := inner.(*Backend)
		if !ok || w.Backend == nil {
			return 0
		}
		inner = w.Backend
	}
}
