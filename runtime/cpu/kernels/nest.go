package kernels

import (
	"fmt"
	"slices"
	"strconv"
)

// axis is one loop of a strided loop nest over two arrays: n iterations, advancing the source
// by s elements and the destination by d elements at each. A nest lists its axes outermost
// first; its innermost axis is a "run" and every other combination of indices a "row".
type axis struct{ n, s, d int }

// simplify drops axes of size 1 and merges each axis into its outer neighbour when the pair
// walks both arrays as one longer axis would, so that contiguous blocks become single long
// runs (copied with copy()). It works in place and returns at least one axis (a scalar nest
// becomes one run of one element). Callers handle empty nests (some n == 0) before.
func simplify(ax []axis) []axis {
	out := ax[:0]
	for _, a := range ax {
		if a.n == 1 {
			continue
		}
		if k := len(out); k > 0 {
			if p := out[k-1]; p.s == a.s*a.n && p.d == a.d*a.n {
				out[k-1] = axis{p.n * a.n, a.s, a.d}
				continue
			}
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		out = append(out, axis{1, 1, 1})
	}
	return out
}

// nestSize is the number of elements a nest visits.
func nestSize(ax []axis) int {
	n := 1
	for _, a := range ax {
		n *= a.n
	}
	return n
}

// rowStart decodes row number r of the outer axes ax into idx and returns the source and
// destination offsets of that row relative to the nest's origin.
func rowStart(ax []axis, r int, idx []int) (s, d int) {
	for i := len(ax) - 1; i >= 0; i-- {
		idx[i] = r % ax[i].n
		r /= ax[i].n
		s += idx[i] * ax[i].s
		d += idx[i] * ax[i].d
	}
	return s, d
}

// nextRow advances the multi-index idx over the outer axes ax by one row (row-major, carrying)
// and returns the change of the source and destination offsets.
func nextRow(ax []axis, idx []int) (ds, dd int) {
	for i := len(ax) - 1; i >= 0; i-- {
		idx[i]++
		ds += ax[i].s
		dd += ax[i].d
		if idx[i] < ax[i].n {
			return ds, dd
		}
		ds -= ax[i].s * ax[i].n
		dd -= ax[i].d * ax[i].n
		idx[i] = 0
	}
	return ds, dd
}

// copyNest copies the elements a simplified nest visits from src (starting at sOff) to dst
// (starting at dOff). Rows are split across workers; when there are too few rows to keep the
// workers busy (a few long runs, e.g. one operand of a concatenation along axis 0), runs are
// cut into pieces as well.
func copyNest[T any](dst []T, dOff int, src []T, sOff int, ax []axis, workers int) {
	outer, run := ax[:len(ax)-1], ax[len(ax)-1]
	rows := nestSize(outer)
	pieces := 1
	if workers > 1 && rows < 4*workers {
		// Pieces of at least minPiece elements: below that, a goroutine is not worth it.
		const minPiece = 1 << 12
		pieces = max(1, min(ceilDiv(4*workers, rows), run.n/minPiece))
	}
	units := rows * pieces
	if workers <= 1 || units <= 1 {
		copyNestRange(dst, dOff, src, sOff, ax, pieces, 0, units)
		return
	}
	axG := slices.Clone(ax) // The goroutines' own copy: ax stays on the caller's stack.
	parallelFor(workers, units, func(lo, hi int) {
		copyNestRange(dst, dOff, src, sOff, axG, pieces, lo, hi)
	})
}

// copyNestRange copies units [lo, hi) of copyNest, a unit being one of the pieces of a row.
func copyNestRange[T any](dst []T, dOff int, src []T, sOff int, ax []axis, pieces, lo, hi int) {
	outer, run := ax[:len(ax)-1], ax[len(ax)-1]
	var ib [stackRank]int
	idx := scratchInts(ib[:], len(outer))
	if pieces == 1 {
		s, d := rowStart(outer, lo, idx)
		copyRows(dst, dOff+d, src, sOff+s, outer, run, hi-lo, idx)
		return
	}
	for u := lo; u < hi; u++ {
		r, p := u/pieces, u%pieces
		s, d := rowStart(outer, r, idx)
		p0, p1 := run.n*p/pieces, run.n*(p+1)/pieces
		copyRun(dst, dOff+d+p0*run.d, src, sOff+s+p0*run.s, axis{p1 - p0, run.s, run.d})
	}
}

// copyRows copies rows consecutive rows of a nest (outer axes, innermost run) starting at the
// row whose multi-index is idx and whose offsets are s and d, advancing idx past them.
func copyRows[T any](dst []T, d int, src []T, s int, outer []axis, run axis, rows int, idx []int) {
	for range rows {
		copyRun(dst, d, src, s, run)
		ds, dd := nextRow(outer, idx)
		s += ds
		d += dd
	}
}

// copyRun copies one run: copy() when both sides are contiguous, a broadcast fill when the
// source does not move, an element loop otherwise.
func copyRun[T any](dst []T, d int, src []T, s int, a axis) {
	switch {
	case a.s == 1 && a.d == 1:
		copy(dst[d:d+a.n], src[s:s+a.n])
	case a.s == 0 && a.d == 1:
		fill(dst[d:d+a.n], src[s])
	default:
		for range a.n {
			dst[d] = src[s]
			d += a.d
			s += a.s
		}
	}
}

// fill sets every element of x to v; long slices by doubling copies, which run at memmove
// speed where an element loop over a generic T would not.
func fill[T any](x []T, v T) {
	if len(x) < 32 {
		for i := range x {
			x[i] = v
		}
		return
	}
	x[0] = v
	for n := 1; n < len(x); n *= 2 {
		copy(x[n:], x[:n])
	}
}

// parallelFill fills x with v, split across workers.
func parallelFill[T any](x []T, v T, workers int) {
	if workers <= 1 {
		fill(x, v)
		return
	}
	const chunk = 1 << 14
	parallelFor(workers, ceilDiv(len(x), chunk), func(lo, hi int) {
		fill(x[lo*chunk:min(hi*chunk, len(x))], v)
	})
}

// stackRank is the rank up to which kernels keep their index scratch in arrays on the stack:
// the sampler runs many tiny graphs, where heap allocations would cost more than the work.
// Higher ranks work the same, with heap scratch.
const stackRank = 8

// scratchInts returns n zeroed ints, in buf when it is large enough.
func scratchInts(buf []int, n int) []int {
	if n > len(buf) {
		return make([]int, n)
	}
	clear(buf[:n])
	return buf[:n]
}

// scratchAxes returns n zeroed axes, in buf when it is large enough.
func scratchAxes(buf []axis, n int) []axis {
	if n > len(buf) {
		return make([]axis, n)
	}
	clear(buf[:n])
	return buf[:n]
}

// rowMajorStrides returns, in buf when it is large enough, the element strides of a
// row-major array with dims.
func rowMajorStrides(buf, dims []int) []int {
	strides := scratchInts(buf, len(dims))
	st := 1
	for i := len(dims) - 1; i >= 0; i-- {
		strides[i] = st
		st *= dims[i]
	}
	return strides
}

// product is the number of elements of an array with dims (1 for a scalar).
func product(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// checkLen panics when a slice's length does not match its dimensions: a caller's bug.
func checkLen(kernel, what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("kernels.%s: len(%s)=%d, want %d", kernel, what, got, want))
	}
}

// dimsStr formats dims for a panic message. Passing the slice itself to fmt would make every
// caller's dims escape to the heap, failure or not.
func dimsStr(dims []int) string {
	b := []byte{'['}
	for i, d := range dims {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return string(append(b, ']'))
}
