package cpu

import (
	"runtime"
	"sync"
)

// parallelThreshold is the work (in elements) above which a kernel is split across cores:
// below it the goroutine hand-off costs more than it saves, and the sampler runs many tiny
// graphs.
const parallelThreshold = 1 << 16

// parallelFor calls fn over [0, n) split into contiguous chunks, one per core, when work (the
// number of elements touched) reaches parallelThreshold; otherwise it calls fn(0, n) directly.
// Chunks write disjoint outputs, so the result does not depend on the number of workers.
func parallelFor(n, work int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if work < parallelThreshold || workers <= 1 || n <= 1 {
		fn(0, n)
		return
	}
	workers = min(workers, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked any
	)
	chunk := (n + workers - 1) / workers
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			// A kernel panic (e.g. integer division by zero) is re-raised on the calling
			// goroutine, where Execute turns it into an error.
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					panicked = p
					mu.Unlock()
				}
			}()
			fn(lo, hi)
		}(lo, min(lo+chunk, n))
	}
	fn(0, min(chunk, n))
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
