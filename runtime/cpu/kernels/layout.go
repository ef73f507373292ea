package kernels

import (
	"fmt"
	"slices"
)

// Transpose: dst has dims srcDims permuted by perm (dst axis i is src axis perm[i]).
//
// Axes that stay adjacent are merged first, so that a permutation keeping the innermost axes in
// place (e.g. [8,256,4,64] → [8,4,256,64]) copies whole contiguous blocks; one that moves the
// innermost axis (e.g. a 2-D transpose) goes through 64×64 tiles.
func Transpose[T any](dst, src []T, srcDims, perm []int) {
	transpose(dst, src, srcDims, perm, workersFor(len(src)))
}

// tileSize is the side of the square tiles of a blocked transpose. Each tile reads tileSize
// source row pieces and writes tileSize destination row pieces of tileSize elements: at 64
// float32s (256 bytes) the pieces are long enough for the hardware prefetchers and for few TLB
// misses per byte; 32 ran 3× slower on a [2048,2048] float32 transpose here.
const tileSize = 64

// minTiled is the size both tiled axes need for tiling to pay: smaller transposes (the
// sampler's) are short element loops, cheaper than setting up a tile buffer.
const minTiled = 16

func transpose[T any](dst, src []T, srcDims, perm []int, workers int) {
	if len(perm) != len(srcDims) {
		panic(fmt.Sprintf("kernels.Transpose: len(perm)=%d, want rank %d", len(perm), len(srcDims)))
	}
	n := product(srcDims)
	checkLen("Transpose", "src", len(src), n)
	checkLen("Transpose", "dst", len(dst), n)
	if n == 0 {
		return
	}
	var sb [stackRank]int
	var ab [stackRank]axis
	ss := rowMajorStrides(sb[:], srcDims)
	ax := scratchAxes(ab[:], len(perm))
	d := 1
	for i := len(perm) - 1; i >= 0; i-- {
		ax[i] = axis{srcDims[perm[i]], ss[perm[i]], d}
		d *= srcDims[perm[i]]
	}
	ax = simplify(ax)
	if last := len(ax) - 1; ax[last].s != 1 && ax[last].n >= minTiled {
		// The source's contiguous axis moved outwards: some other axis has stride 1.
		for k := range ax[:last] {
			if ax[k].s == 1 && ax[k].n >= minTiled {
				transposeTiled(dst, src, ax, k, workers)
				return
			}
		}
	}
	copyNest(dst, 0, src, 0, ax, workers)
}

// transposeTiled copies a simplified nest whose innermost axis is contiguous in dst only and
// whose axis k is contiguous in src only, tile by tile over those two axes. Each tile goes
// through a small buffer: read from src in contiguous row pieces, written to dst in contiguous
// row pieces (walking either array with its row stride touches a new cache line, often a new
// page, per element). A unit of work is a band of tileSize source rows, swept across all
// columns, so consecutive tiles continue the same source rows.
func transposeTiled[T any](dst, src []T, ax []axis, k, workers int) {
	last := len(ax) - 1
	units := nestSize(ax) / (ax[k].n * ax[last].n) * ceilDiv(ax[last].n, tileSize)
	if workers <= 1 || units <= 1 {
		transposeTiledRange(dst, src, ax, k, 0, units)
		return
	}
	axG := slices.Clone(ax) // The goroutines' own copy: ax stays on the caller's stack.
	parallelFor(workers, units, func(lo, hi int) {
		transposeTiledRange(dst, src, axG, k, lo, hi)
	})
}

// transposeTiledRange copies units [lo, hi) of transposeTiled: bands of tileSize source rows
// (along the last axis) for one index of the other outer axes.
func transposeTiledRange[T any](dst, src []T, ax []axis, k, lo, hi int) {
	last := len(ax) - 1
	ka, la := ax[k], ax[last]
	var ob [stackRank]axis
	outer := append(append(ob[:0], ax[:k]...), ax[k+1:last]...)
	var ib [stackRank]int
	idx := scratchInts(ib[:], len(outer))
	lTiles := ceilDiv(la.n, tileSize)
	var buf [tileSize * tileSize]T // buf[ik*tileSize+il] = element (ik, il) of the tile
	for u := lo; u < hi; u++ {
		s, d := rowStart(outer, u/lTiles, idx)
		l0 := (u % lTiles) * tileSize
		ln := min(tileSize, la.n-l0)
		for k0 := 0; k0 < ka.n; k0 += tileSize {
			kn := min(tileSize, ka.n-k0)
			for il := range ln {
				o := s + (l0+il)*la.s + k0
				for ik, v := range src[o : o+kn] {
					buf[ik*tileSize+il] = v
				}
			}
			for ik := range kn {
				o := d + (k0+ik)*ka.d + l0
				copy(dst[o:o+ln], buf[ik*tileSize:ik*tileSize+ln])
			}
		}
	}
}

// BroadcastInDim (XLA semantics): src axis i maps to dst axis broadcastAxes[i]; src dims are 1 or
// equal to the dst dim; len(src) may be 1 for a scalar (broadcastAxes empty).
func BroadcastInDim[T any](dst, src []T, srcDims, dstDims, broadcastAxes []int) {
	broadcastInDim(dst, src, srcDims, dstDims, broadcastAxes, workersFor(len(dst)))
}

func broadcastInDim[T any](dst, src []T, srcDims, dstDims, broadcastAxes []int, workers int) {
	if len(broadcastAxes) != len(srcDims) {
		panic(fmt.Sprintf("kernels.BroadcastInDim: len(broadcastAxes)=%d, want src rank %d", len(broadcastAxes), len(srcDims)))
	}
	n := product(dstDims)
	checkLen("BroadcastInDim", "dst", len(dst), n)
	checkLen("BroadcastInDim", "src", len(src), product(srcDims))
	if n == 0 {
		return
	}
	var sb, db [stackRank]int
	var ab [stackRank]axis
	ss, ds := rowMajorStrides(sb[:], srcDims), rowMajorStrides(db[:], dstDims)
	// A dst axis no src axis maps to (or one mapped from a size-1 src axis) repeats the source:
	// stride 0 there.
	ax := scratchAxes(ab[:], len(dstDims))
	for j := range dstDims {
		ax[j] = axis{dstDims[j], 0, ds[j]}
	}
	for i, j := range broadcastAxes {
		if j < 0 || j >= len(dstDims) || (srcDims[i] != 1 && srcDims[i] != dstDims[j]) {
			panic(fmt.Sprintf("kernels.BroadcastInDim: src dims %s cannot broadcast to %s along axes %s", dimsStr(srcDims), dimsStr(dstDims), dimsStr(broadcastAxes)))
		}
		if srcDims[i] != 1 {
			ax[j].s = ss[i]
		}
	}
	copyNest(dst, 0, src, 0, simplify(ax), workers)
}

// Slice with strides (all >= 1); dst dims are ceil((limit-start)/stride).
func Slice[T any](dst, src []T, srcDims, starts, limits, strides []int) {
	slice(dst, src, srcDims, starts, limits, strides, workersFor(len(dst)))
}

func slice[T any](dst, src []T, srcDims, starts, limits, strides []int, workers int) {
	rank := len(srcDims)
	if len(starts) != rank || len(limits) != rank || len(strides) != rank {
		panic(fmt.Sprintf("kernels.Slice: starts, limits and strides need %d values each, got %d, %d, %d",
			rank, len(starts), len(limits), len(strides)))
	}
	checkLen("Slice", "src", len(src), product(srcDims))
	var sb [stackRank]int
	var ab [stackRank]axis
	ss := rowMajorStrides(sb[:], srcDims)
	ax := scratchAxes(ab[:], rank)
	n, sOff := 1, 0
	for i := range rank {
		ax[i] = axis{n: max(0, ceilDiv(limits[i]-starts[i], strides[i])), s: ss[i] * strides[i]}
		n *= ax[i].n
		sOff += starts[i] * ss[i]
	}
	checkLen("Slice", "dst", len(dst), n)
	if n == 0 {
		return
	}
	d := 1
	for i := rank - 1; i >= 0; i-- {
		ax[i].d = d
		d *= ax[i].n
	}
	copyNest(dst, 0, src, sOff, simplify(ax), workers)
}

// Concatenate along axis; srcDims[i] are the operands' dims (equal except on axis).
func Concatenate[T any](dst []T, srcs [][]T, srcDims [][]int, axis int) {
	concatenate(dst, srcs, srcDims, axis, workersFor(len(dst)))
}

func concatenate[T any](dst []T, srcs [][]T, srcDims [][]int, ax int, workers int) {
	if len(srcs) != len(srcDims) || len(srcs) == 0 {
		panic(fmt.Sprintf("kernels.Concatenate: %d operands with %d shapes", len(srcs), len(srcDims)))
	}
	// Every operand is a block of rows: outer rows (the axes before ax) of its own length
	// (its dim on ax times the inner axes), placed side by side in dst's rows.
	outer, inner := product(srcDims[0][:ax]), product(srcDims[0][ax+1:])
	rowLen := 0
	for i, dims := range srcDims {
		if len(dims) != len(srcDims[0]) || product(dims[:ax]) != outer || product(dims[ax+1:]) != inner {
			panic(fmt.Sprintf("kernels.Concatenate: operand dims %s do not match %s off axis %d", dimsStr(dims), dimsStr(srcDims[0]), ax))
		}
		if len(srcs[i]) != product(dims) {
			panic(fmt.Sprintf("kernels.Concatenate: len(srcs[%d])=%d, want %d", i, len(srcs[i]), product(dims)))
		}
		rowLen += dims[ax] * inner
	}
	checkLen("Concatenate", "dst", len(dst), outer*rowLen)
	if len(dst) == 0 {
		return
	}
	off := 0
	for i, dims := range srcDims {
		l := dims[ax] * inner
		if l > 0 {
			ab := [2]axis{{outer, l, rowLen}, {l, 1, 1}}
			copyNest(dst, off, srcs[i], 0, simplify(ab[:]), workers)
		}
		off += l
	}
}

// Pad (XLA semantics, negative low/high allowed, interior >= 0): dst dim i is
// Start + End + n + (n-1)·Interior for a src dim n >= 1 (Start + End for n = 0); dst holds fill
// except where source elements land.
func Pad[T any](dst, src []T, srcDims []int, fill T, axes []PadAxis) {
	pad(dst, src, srcDims, fill, axes, workersFor(len(dst)))
}

func pad[T any](dst, src []T, srcDims []int, fillValue T, axes []PadAxis, workers int) {
	rank := len(srcDims)
	if len(axes) != rank {
		panic(fmt.Sprintf("kernels.Pad: %d PadAxis for rank %d", len(axes), rank))
	}
	checkLen("Pad", "src", len(src), product(srcDims))
	var ddb [stackRank]int
	dstDims := scratchInts(ddb[:], rank)
	for i, n := range srcDims {
		dstDims[i] = axes[i].Start + axes[i].End + n + max(n-1, 0)*axes[i].Interior
	}
	checkLen("Pad", "dst", len(dst), product(dstDims))
	if len(dst) == 0 {
		return
	}
	var sb, db [stackRank]int
	var ab [stackRank]axis
	ss, ds := rowMajorStrides(sb[:], srcDims), rowMajorStrides(db[:], dstDims)
	ax := scratchAxes(ab[:], rank)
	covered := true // Whether the source elements cover all of dst, making the fill useless.
	sOff, dOff, count := 0, 0, 1
	for i, n := range srcDims {
		p := axes[i]
		step := p.Interior + 1
		// Source index j lands at p.Start + j·step: keep the j that land inside [0, dstDims[i]).
		lo := 0
		if p.Start < 0 {
			lo = ceilDiv(-p.Start, step)
		}
		hi := -1
		if last := dstDims[i] - 1 - p.Start; last >= 0 {
			hi = min(n-1, last/step)
		}
		ax[i] = axis{max(0, hi-lo+1), ss[i], ds[i] * step}
		count *= ax[i].n
		sOff += lo * ss[i]
		dOff += (p.Start + lo*step) * ds[i]
		covered = covered && p.Start <= 0 && p.End <= 0 && (p.Interior == 0 || n <= 1)
	}
	if !covered {
		parallelFill(dst, fillValue, workers)
	}
	if count > 0 {
		copyNest(dst, dOff, src, sOff, simplify(ax), workers)
	}
}

// Reverse reverses dst = src (both with dims) along each of axes.
func Reverse[T any](dst, src []T, dims, axes []int) {
	reverse(dst, src, dims, axes, workersFor(len(dst)))
}

func reverse[T any](dst, src []T, dims, axes []int, workers int) {
	n := product(dims)
	checkLen("Reverse", "src", len(src), n)
	checkLen("Reverse", "dst", len(dst), n)
	if n == 0 {
		return
	}
	var sb [stackRank]int
	var ab [stackRank]axis
	st := rowMajorStrides(sb[:], dims)
	ax := scratchAxes(ab[:], len(dims))
	for i := range dims {
		ax[i] = axis{dims[i], st[i], st[i]}
	}
	sOff := 0
	for _, a := range axes {
		// Walk the source backwards from its last element on this axis.
		if ax[a].s > 0 {
			sOff += (dims[a] - 1) * st[a]
			ax[a].s = -st[a]
		}
	}
	copyNest(dst, 0, src, sOff, simplify(ax), workers)
}

// Iota fills dst (dims) with the index along axis.
func Iota[T Number](dst []T, dims []int, axis int) {
	iotaFill(dst, dims, axis, workersFor(len(dst)))
}

func iotaFill[T Number](dst []T, dims []int, ax int, workers int) {
	if ax < 0 || ax >= len(dims) {
		panic(fmt.Sprintf("kernels.Iota: axis %d out of range for rank %d", ax, len(dims)))
	}
	checkLen("Iota", "dst", len(dst), product(dims))
	if len(dst) == 0 {
		return
	}
	n, inner := dims[ax], product(dims[ax+1:])
	rows := len(dst) / inner
	if workers <= 1 {
		iotaRange(dst, n, inner, 0, rows)
		return
	}
	parallelFor(workers, rows, func(lo, hi int) { iotaRange(dst, n, inner, lo, hi) })
}

// iotaRange fills rows [lo, hi) of Iota's dst: row r holds inner copies of r mod n.
func iotaRange[T Number](dst []T, n, inner, lo, hi int) {
	for r := lo; r < hi; r++ {
		fill(dst[r*inner:(r+1)*inner], T(r%n))
	}
}
