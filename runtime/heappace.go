package runtime

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The Go heap's garbage, bounded.
//
// A model's weights, its frozen reference and the AdamW moments live on the Go heap (the cpu
// backend adopts them as they are: runtime/cpu AdoptFlat): at 0.5B parameters that is 10–12
// GiB of live, pointer-free data. With GOGC=100 the collector lets the heap grow to twice its
// live size before it runs, so a train step's replaced outputs, a checkpoint's encode buffers or
// a sampler's copy of the weights could pile up as gigabytes of garbage: a 0.5B GRPO run's heap
// held 17 GiB (the soft memory limit cmd/stx sets) where 11 GiB were live, and the run peaked
// at 23 GiB of RSS on a 24 GiB machine. The collector is cheap here (the weights are a few
// large objects it never scans), so collecting more often costs little.
// PaceHeap keeps the garbage the heap may grow by to a bounded allowance instead.

const (
	// garbageFloor is the least garbage a collection cycle allows, in bytes: a small heap keeps
	// the default pacing (GOGC=100) until its live data reaches this.
	garbageFloor = 512 << 20
	// garbageShare is the share of the live heap a cycle allows as garbage above the floor
	// (1/garbageShare): the peak stays within about 1/8 of the live set.
	garbageShare = 8
)

var paceOnce sync.Once

// PaceHeap sets the collector's target after every collection so that the heap grows by at
// most max(512 MiB, live/8) of garbage before the next one, rather than by as much as is live
// (GOGC=100). A GOGC set in the environment is the user's choice and is left alone. It is meant
// to be called once, at the start of a process that trains or samples; later calls do nothing.
func PaceHeap() {
	if os.Getenv("GOGC") != "" {
		return
	}
	paceOnce.Do(func() { armPacer(new(pacer)) })
}

// pacer remembers the GOGC it set last.
type pacer struct {
	mu      sync.Mutex
	percent int
}

// gcSentinel is an object that becomes unreachable at once: its cleanup runs after the
// collection that finds it so. It has a pointer, so that the tiny allocator (pointer-free
// objects under 16 bytes), whose blocks may outlive their objects, never holds it.
type gcSentinel struct {
	p *pacer
	_ [2]uintptr
}

// armPacer registers the cleanup that repaces the heap after the next collection.
func armPacer(p *pacer) {
	s := &gcSentinel{p: p}
	runtime.AddCleanup(s, func(p *pacer) {
		p.pace()
		armPacer(p)
	}, p)
}

// pace sets GOGC from the live heap the last collection measured.
func (p *pacer) pace() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	percent := gcPercentFor(sample[0].Value.Uint64())
	p.mu.Lock()
	defer p.mu.Unlock()
	if percent != p.percent {
		debug.SetGCPercent(percent)
		p.percent = percent
	}
}

// gcPercentFor is the GOGC that lets a heap of live bytes grow by max(garbageFloor,
// live/garbageShare) before the next collection, at most 100 (the default).
func gcPercentFor(live uint64) int {
	if live == 0 {
		return 100
	}
	allowance := max(uint64(garbageFloor), live/garbageShare)
	return int(min(100, allowance*100/live))
}
