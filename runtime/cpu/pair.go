package cpu

import (
	"sync"

	"stx.dev/stx/runtime/cpu/blas"
)

// Running two independent matrix products side by side.
//
// A product large enough for OpenBLAS's thread pool (blas.UsesPool) is spread over the cores,
// whose threads share packed panels and wait on each other. Two independent products of
// similar size, each on one thread at the same time, keep both cores busy without that. A
// training step has many: each Linear's backward computes dX = dY·Wᵀ and dW = Xᵀ·dY from the
// same dY, and the forward projects one input through q, k and v, gate and up. The program's
// order puts them apart, so Compile moves each pair next to each other (pairProducts) and
// execute runs the two at once (runPair). It does so where that pays with the OpenBLAS
// kernels in use (blas.SideBySidePays).
//
// Measured on 2 cores (Zen 5, OpenBLAS 0.3.21). With SkylakeX's kernels, stx bench's medians
// of 9 alternated runs against unpaired: forward log-probs 1.10×, GRPO step 1.14×, SFT step
// 1.13×, KV-cache sampling 1.01×; the large products of the forward and gradient graphs take
// 6-11 % less time (each product's fastest of 30-40 runs: pairs at 280-325 GFLOP/s, the pool
// at 240-300). With Haswell's kernels the pool already reaches 170-190 GFLOP/s, pairs 165-190
// (one thread 100), and stx bench moved 0.97-1.05×: nothing gained, so blas.SideBySidePays
// keeps pairing off there. While other processes held the cores, pairs fared worse than the
// pool (11-17 % in one such run). BenchmarkSgemmPair in package blas measures pairs alone.

// pairMode says when Compile pairs products.
type pairMode int

const (
	pairAuto pairMode = iota // where it pays with the OpenBLAS kernels in use (blas.SideBySidePays)
	pairOff                  // never (tests comparing both programs)
	pairOn                   // always (tests of pairing on any kernels)
)

func (m pairMode) enabled() bool {
	return m == pairOn || (m == pairAuto && blas.SideBySidePays())
}

const (
	// pairMaxWorkRatio bounds how much more work one product of a pair may have than the
	// other: the core that finishes first idles until the other does.
	pairMaxWorkRatio = 1.3
	// pairMaxDistance is how many steps after a product its partner may be. In the programs of
	// GoMLX's layers and gradients partners are one or two steps apart (the bench model's);
	// farther ones would move a product's output, or its inputs' last use, across much of the
	// program and keep memory alive longer.
	pairMaxDistance = 64
)

// pairProducts reorders steps (a topological order) so that pairs of independent products of
// similar work, as work reports them, are adjacent, and marks the first step of each pair. It
// returns the number of pairs. The order it makes depends only on the steps and work.
//
// For each product in turn it takes the nearest later one that does not depend on it, has
// similar work, and is not separated from it by a pair already made. Between the two, the
// steps that do not depend on the first move before it, those that do move after the second,
// each keeping its order: the program stays topological, as the second depends on none of
// those that move after it, and the first on none of those that move before.
func pairProducts(steps []step, work func(*node) (int, bool)) int {
	pos := make(map[int]int, len(steps)) // node index -> step position
	for i, s := range steps {
		pos[s.n.idx] = i
	}
	pairs := 0
	dep := make([]bool, len(steps)) // dep[q]: step q depends on the product at position i
	for i := 0; i < len(steps); i++ {
		wi, ok := work(steps[i].n)
		if !ok || steps[i].paired || (i > 0 && steps[i-1].paired) {
			continue
		}
		partner := -1
		dep[i] = true
		last := min(len(steps)-1, i+pairMaxDistance)
		for q := i + 1; q <= last && partner < 0; q++ {
			if steps[q].paired {
				break // moving steps across a pair could part it
			}
			dep[q] = false
			for _, in := range steps[q].inputs {
				if p, ok := pos[in]; ok && p >= i && p < q && dep[p] {
					dep[q] = true
					break
				}
			}
			if wq, ok := work(steps[q].n); ok && !dep[q] && similarWork(wi, wq) {
				partner = q
			}
		}
		if partner < 0 {
			continue
		}
		// steps[i:partner+1] becomes: the independent steps, the pair, the dependent ones.
		span := make([]step, 0, partner-i+1)
		var after []step
		for q := i + 1; q < partner; q++ {
			if dep[q] {
				after = append(after, steps[q])
			} else {
				span = append(span, steps[q])
			}
		}
		first := len(span)
		span = append(span, steps[i], steps[partner])
		span = append(span, after...)
		copy(steps[i:], span)
		steps[i+first].paired = true
		for q := i; q <= partner; q++ {
			pos[steps[q].n.idx] = q
		}
		pairs++
		// The independent steps now at i.. are yet to be considered as first of a pair.
		i--
	}
	return pairs
}

// similarWork says whether two products' work differs by at most pairMaxWorkRatio.
func similarWork(a, b int) bool {
	lo, hi := float64(min(a, b)), float64(max(a, b))
	return hi <= lo*pairMaxWorkRatio
}

// runPair runs steps si and si+1, a pair made by pairProducts, at the same time: the second
// on a new goroutine, each with its products on one thread. Neither may write into its
// inputs (a root both read dies only once both are done), so both are told they own none.
// It returns their outputs; a panic in either is raised again once both have finished.
func (e *Executable) runPair(r *execution, vals []*Buffer, si int) (outs [2]*Buffer, errs [2]error) {
	var panics [2]any
	run := func(k int, inBufs []*Buffer) {
		defer func() { panics[k] = recover() }()
		s := &e.steps[si+k]
		sole := *r
		sole.oneThread = true
		sole.escapes = s.escapes
		outs[k], errs[k] = s.fn(&sole, s.n, inBufs, make([]bool, len(inBufs)))
	}
	inputs := func(s *step) []*Buffer {
		in := make([]*Buffer, len(s.inputs))
		for i, idx := range s.inputs {
			in[i] = vals[idx]
		}
		return in
	}
	in0, in1 := inputs(&e.steps[si]), inputs(&e.steps[si+1])
	var wg sync.WaitGroup
	wg.Go(func() { run(1, in1) })
	run(0, in0)
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	return outs, errs
}
