package kernels

import (
	"fmt"
	"slices"
)

// Reduce over axes (any subset, in any order); dst has the remaining dims in order. Sum of an
// empty set is 0, product 1, max -Inf (or the type's minimum), min +Inf (or maximum).
//
// An empty axes reduces nothing (dst is src, with -0 sums turned into +0). GoMLX's backend ops
// read "no axes" as "every axis": the executor passes all axes explicitly in that case.
//
// Adjacent axes of the same kind are merged first. When the innermost merged axis is reduced,
// each output element folds contiguous runs (last-axis reductions); when it is kept, blocks of
// contiguous outputs are updated row by row from contiguous source rows (leading- and
// middle-axis reductions). Work is split over output elements only.
func Reduce[T Number](dst, src []T, srcDims, axes []int, op ReduceOp) {
	reduce(dst, src, srcDims, axes, op, workersFor(len(src)))
}

func reduce[T Number](dst, src []T, srcDims, axes []int, op ReduceOp, workers int) {
	rank := len(srcDims)
	var isReduced [64]bool // Ranks are far below 64.
	if rank > len(isReduced) {
		panic(fmt.Sprintf("kernels.Reduce: rank %d above 64", rank))
	}
	for _, a := range axes {
		if a < 0 || a >= rank || isReduced[a] {
			panic(fmt.Sprintf("kernels.Reduce: axes %s invalid for rank %d", dimsStr(axes), rank))
		}
		isReduced[a] = true
	}
	outN := 1
	for i, n := range srcDims {
		if !isReduced[i] {
			outN *= n
		}
	}
	checkLen("Reduce", "src", len(src), product(srcDims))
	checkLen("Reduce", "dst", len(dst), outN)
	if outN == 0 {
		return
	}
	id := identity[T](op)
	if len(src) == 0 {
		parallelFill(dst, id, workers)
		return
	}

	// Merge adjacent axes of the same kind, dropping size-1 axes (they change nothing).
	type group struct {
		n       int
		reduced bool
	}
	var gb [stackRank]group
	groups := gb[:0]
	for i, n := range srcDims {
		if n == 1 {
			continue
		}
		if k := len(groups); k > 0 && groups[k-1].reduced == isReduced[i] {
			groups[k-1].n *= n
			continue
		}
		groups = append(groups, group{n, isReduced[i]})
	}
	last := len(groups) - 1
	if last < 0 || (last == 0 && !groups[0].reduced) {
		// Only size-1 axes are reduced: each output is op(identity, its one element), which
		// is the element itself except that a sum turns -0 into +0, as XLA's does.
		parallelFill(dst, id, workers)
		combineRun(op, dst, src)
		return
	}

	// Strides: src row-major over the groups; dst row-major over the kept groups.
	var kb, rb [stackRank]axis
	kept := kb[:0] // n, src stride, dst stride
	red := rb[:0]  // n, src stride
	s := 1
	for i := last; i >= 0; i-- {
		if groups[i].reduced {
			red = append(red, axis{n: groups[i].n, s: s})
		} else {
			kept = append(kept, axis{n: groups[i].n, s: s})
		}
		s *= groups[i].n
	}
	reverseAxes(kept)
	reverseAxes(red)
	d := 1
	for i := len(kept) - 1; i >= 0; i-- {
		kept[i].d = d
		d *= kept[i].n
	}

	if groups[last].reduced {
		reduceRows(dst, src, kept, red, op, id, workers)
	} else {
		reduceColumns(dst, src, kept, red, op, id, workers)
	}
}

// reduceRows handles a reduced innermost axis: the last of red is a contiguous run folded into
// each output element, once per combination of the other reduced axes.
func reduceRows[T Number](dst, src []T, kept, red []axis, op ReduceOp, id T, workers int) {
	units := nestSize(kept)
	if workers <= 1 || units <= 1 {
		// Direct call, no closure: tiny reductions (the sampler's) allocate nothing here.
		reduceRowsRange(dst, src, kept, red, op, id, 0, units)
		return
	}
	// The goroutines get their own copies, so that kept and red stay on the caller's stack.
	keptG, redG := slices.Clone(kept), slices.Clone(red)
	parallelFor(workers, units, func(lo, hi int) {
		reduceRowsRange(dst, src, keptG, redG, op, id, lo, hi)
	})
}

// reduceRowsRange computes outputs [lo, hi) of reduceRows.
func reduceRowsRange[T Number](dst, src []T, kept, red []axis, op ReduceOp, id T, lo, hi int) {
	outer, run := red[:len(red)-1], red[len(red)-1].n
	redRows := nestSize(outer)
	var kb, rb [stackRank]int
	kIdx, rIdx := scratchInts(kb[:], len(kept)), scratchInts(rb[:], len(outer))
	s, _ := rowStart(kept, lo, kIdx)
	for o := lo; o < hi; o++ {
		acc := id
		rs := s
		for range redRows {
			acc = reduceRun(op, acc, src[rs:rs+run])
			ds, _ := nextRow(outer, rIdx)
			rs += ds
		}
		dst[o] = acc
		ds, _ := nextRow(kept, kIdx)
		s += ds
	}
}

// reduceColumns handles a kept innermost axis: outputs come in contiguous blocks (the last of
// kept), each folded row by row from contiguous source rows, one per combination of the reduced
// axes. With fewer blocks than workers (e.g. a [2048,2048] reduced over axis 0) blocks are cut
// into column pieces so every worker gets a share of the outputs.
func reduceColumns[T Number](dst, src []T, kept, red []axis, op ReduceOp, id T, workers int) {
	blocks, width := nestSize(kept[:len(kept)-1]), kept[len(kept)-1].n
	pieces := 1
	if workers > 1 && blocks < workers {
		const minPiece = 256
		pieces = max(1, min(ceilDiv(workers, blocks), width/minPiece))
	}
	units := blocks * pieces
	if workers <= 1 || units <= 1 {
		reduceColumnsRange(dst, src, kept, red, op, id, pieces, 0, units)
		return
	}
	keptG, redG := slices.Clone(kept), slices.Clone(red)
	parallelFor(workers, units, func(lo, hi int) {
		reduceColumnsRange(dst, src, keptG, redG, op, id, pieces, lo, hi)
	})
}

// reduceColumnsRange computes units [lo, hi) of reduceColumns, a unit being one of the pieces
// of an output block.
func reduceColumnsRange[T Number](dst, src []T, kept, red []axis, op ReduceOp, id T, pieces, lo, hi int) {
	outer, width := kept[:len(kept)-1], kept[len(kept)-1].n
	redRows := nestSize(red)
	var kb, rb [stackRank]int
	kIdx, rIdx := scratchInts(kb[:], len(outer)), scratchInts(rb[:], len(red))
	// Blocks follow each other: decode the first, then step (no division per block, which
	// counts when blocks are short, e.g. RoPE's pairs: 32 outputs from 2 rows).
	b0 := lo / pieces
	s, d := rowStart(outer, b0, kIdx)
	for u := lo; u < hi; u++ {
		b, p := u/pieces, u%pieces
		if b != b0 {
			ds, dd := nextRow(outer, kIdx)
			s, d, b0 = s+ds, d+dd, b
		}
		p0, p1 := width*p/pieces, width*(p+1)/pieces
		out := dst[d+p0 : d+p1]
		if redRows == 2 {
			// One pass for a pair (RoPE's halves: 32 outputs from 2 rows per block). Reduced
			// groups have two or more elements: this is one group of two, red[0].
			r0, r1 := s+p0, s+p0+red[0].s
			combineFrom2(op, out, id, src[r0:r0+len(out)], src[r1:r1+len(out)])
			continue
		}
		if len(out) < 256 {
			for i := range out {
				out[i] = id
			}
		} else {
			fill(out, id)
		}
		rs := s + p0
		r := 0
		// Four rows per pass: out is loaded and stored once per four rows; each element
		// still takes its rows one by one in order, so the result is the same as row by row.
		for ; r+4 <= redRows; r += 4 {
			r0 := rs
			ds, _ := nextRow(red, rIdx)
			r1 := r0 + ds
			ds, _ = nextRow(red, rIdx)
			r2 := r1 + ds
			ds, _ = nextRow(red, rIdx)
			r3 := r2 + ds
			ds, _ = nextRow(red, rIdx)
			rs = r3 + ds
			n := len(out)
			combine4(op, out, src[r0:r0+n], src[r1:r1+n], src[r2:r2+n], src[r3:r3+n])
		}
		for ; r < redRows; r++ {
			combineRun(op, out, src[rs:rs+len(out)])
			ds, _ := nextRow(red, rIdx)
			rs += ds
		}
	}
}

func reverseAxes(ax []axis) {
	for i, j := 0, len(ax)-1; i < j; i, j = i+1, j-1 {
		ax[i], ax[j] = ax[j], ax[i]
	}
}

// ArgMinMax along axis: index of the first min/max; NaN wins (as XLA: a NaN is the max and the
// min), the first NaN if several. dst has srcDims without axis.
func ArgMinMax[T Number, O Index](dst []O, src []T, srcDims []int, axis int, isMin bool) {
	argMinMax(dst, src, srcDims, axis, isMin, workersFor(len(src)))
}

func argMinMax[T Number, O Index](dst []O, src []T, srcDims []int, ax int, isMin bool, workers int) {
	if ax < 0 || ax >= len(srcDims) {
		panic(fmt.Sprintf("kernels.ArgMinMax: axis %d out of range for rank %d", ax, len(srcDims)))
	}
	outer, n, inner := product(srcDims[:ax]), srcDims[ax], product(srcDims[ax+1:])
	checkLen("ArgMinMax", "src", len(src), outer*n*inner)
	checkLen("ArgMinMax", "dst", len(dst), outer*inner)
	if len(dst) == 0 {
		return
	}
	if n == 0 {
		// No candidates: XLA's reduction yields its initial index, 0.
		fill(dst, 0)
		return
	}
	if inner == 1 {
		if workers <= 1 {
			argRowsRange(dst, src, n, isMin, 0, outer)
			return
		}
		parallelFor(workers, outer, func(lo, hi int) { argRowsRange(dst, src, n, isMin, lo, hi) })
		return
	}
	// Blocks of inner outputs, scanned row by row; the best index so far lives in dst itself and
	// its value is read back from src, so no scratch is needed.
	pieces := 1
	if workers > 1 && outer < 4*workers {
		const minPiece = 256
		pieces = max(1, min(ceilDiv(4*workers, outer), inner/minPiece))
	}
	if workers <= 1 {
		argColumnsRange(dst, src, n, inner, pieces, isMin, 0, outer*pieces)
		return
	}
	parallelFor(workers, outer*pieces, func(lo, hi int) { argColumnsRange(dst, src, n, inner, pieces, isMin, lo, hi) })
}

// argRowsRange computes outputs [lo, hi) of ArgMinMax over contiguous runs of n.
func argRowsRange[T Number, O Index](dst []O, src []T, n int, isMin bool, lo, hi int) {
	for o := lo; o < hi; o++ {
		dst[o] = O(argRun(src[o*n:(o+1)*n], isMin))
	}
}

// argColumnsRange computes units [lo, hi) of ArgMinMax along a non-innermost axis of size n,
// a unit being one of the pieces of a block of inner outputs.
func argColumnsRange[T Number, O Index](dst []O, src []T, n, inner, pieces int, isMin bool, lo, hi int) {
	for u := lo; u < hi; u++ {
		o, p := u/pieces, u%pieces
		p0, p1 := inner*p/pieces, inner*(p+1)/pieces
		out := dst[o*inner+p0 : o*inner+p1]
		fill(out, 0)
		base := o*n*inner + p0
		for a := 1; a < n; a++ {
			row := src[base+a*inner : base+a*inner+len(out)]
			for k, v := range row {
				if better(v, src[base+int(out[k])*inner+k], isMin) {
					out[k] = O(a)
				}
			}
		}
	}
}

// better reports whether candidate v replaces the current best b: a NaN best is final, a NaN
// candidate wins, otherwise strictly smaller (isMin) or larger, so ties keep the first index.
func better[T Number](v, b T, isMin bool) bool {
	if b != b {
		return false
	}
	if v != v {
		return true
	}
	if isMin {
		return v < b
	}
	return v > b
}

// argRun returns the index of the first min (isMin) or max of a non-empty contiguous run, or
// of its first NaN. One comparison per element on the common path: !(v <= b) holds for a
// larger v and for a NaN, which is then told apart.
func argRun[T Number](x []T, isMin bool) int {
	best, b := 0, x[0]
	if b != b {
		return 0
	}
	if isMin {
		for i, v := range x {
			if !(v >= b) {
				if v != v {
					return i
				}
				best, b = i, v
			}
		}
		return best
	}
	for i, v := range x {
		if !(v <= b) {
			if v != v {
				return i
			}
			best, b = i, v
		}
	}
	return best
}
