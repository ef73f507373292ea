package kernels

import (
	"runtime"
	"sync"
)

// parallelThreshold is the number of elements a kernel must touch before it is split across
// goroutines: below it, starting goroutines costs more than it saves (the sampler runs many tiny
// graphs).
const parallelThreshold = 1 << 16

// workersFor returns how many goroutines a kernel touching work elements should use.
func workersFor(work int) int {
	if work < parallelThreshold {
		return 1
	}
	return runtime.GOMAXPROCS(0)
}

// parallelFor calls fn over a partition of [0, units) into at most workers contiguous ranges,
// concurrently when there is more than one, and returns when all are done. Callers only ever
// partition output elements, so results never depend on workers.
func parallelFor(workers, units int, fn func(lo, hi int)) {
	if units <= 0 {
		return
	}
	workers = min(workers, units)
	if workers <= 1 {
		fn(0, units)
		return
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for w := 1; w < workers; w++ {
		lo, hi := units*w/workers, units*(w+1)/workers
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	// The calling goroutine takes the first range itself instead of idling in Wait.
	fn(0, units/workers)
	wg.Wait()
}

// ceilDiv is ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int) int { return (a + b - 1) / b }
