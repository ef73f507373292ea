package kernels

import (
	"fmt"
	"slices"
)

// Gather (XLA semantics, as GoMLX's backends.StandardOps.Gather documents it), start indices
// clamped so the slice fits in the operand.
//
// Each batch position (indices' axes other than indexVectorAxis) reads its start index vector,
// clamps it and copies one slice of the operand; slices are copied as merged contiguous runs, so
// the forms GoMLX emits (embedding lookups, GatherSlices) are one copy() per row.
func Gather[T any, I Index](dst, operand []T, operandDims []int, indices []I, indicesDims []int,
	indexVectorAxis int, offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes, dstDims []int) {
	gather(dst, operand, operandDims, indices, indicesDims, indexVectorAxis, offsetOutputAxes,
		collapsedSliceAxes, startIndexMap, sliceSizes, dstDims, workersFor(len(dst)))
}

func gather[T any, I Index](dst, operand []T, operandDims []int, indices []I, indicesDims []int,
	indexVectorAxis int, offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes, dstDims []int, workers int) {
	opRank := len(operandDims)
	if opRank > 64 || len(dstDims) > 64 {
		panic(fmt.Sprintf("kernels.Gather: rank above 64 (operand %s, dst %s)", dimsStr(operandDims), dimsStr(dstDims)))
	}
	if len(sliceSizes) != opRank || len(collapsedSliceAxes)+len(offsetOutputAxes) != opRank {
		panic(fmt.Sprintf("kernels.Gather: sliceSizes %s, collapsedSliceAxes %s, offsetOutputAxes %s inconsistent with operand rank %d",
			dimsStr(sliceSizes), dimsStr(collapsedSliceAxes), dimsStr(offsetOutputAxes), opRank))
	}
	checkLen("Gather", "operand", len(operand), product(operandDims))
	checkLen("Gather", "indices", len(indices), product(indicesDims))
	checkLen("Gather", "dst", len(dst), product(dstDims))
	if len(dst) == 0 {
		return
	}
	var ib, db, ob [stackRank]int
	iStrides, dStrides, oStrides := rowMajorStrides(ib[:], indicesDims), rowMajorStrides(db[:], dstDims), rowMajorStrides(ob[:], operandDims)

	// The batch axes of indices map, in order, to the dst axes that are not offset axes.
	var bb [stackRank]axis
	batch, ivStride, ivLen := indexBatchAxes(bb[:0], indicesDims, iStrides, indexVectorAxis, offsetOutputAxes, dStrides)
	if len(startIndexMap) != ivLen || len(batch)+len(offsetOutputAxes) != len(dstDims) {
		panic(fmt.Sprintf("kernels.Gather: startIndexMap %s, indices dims %s (index vector axis %d) and dst dims %s are inconsistent",
			dimsStr(startIndexMap), dimsStr(indicesDims), indexVectorAxis, dimsStr(dstDims)))
	}

	// The slice: non-collapsed operand axes map, in order, to offsetOutputAxes.
	var isCollapsed [64]bool
	for _, a := range collapsedSliceAxes {
		isCollapsed[a] = true
	}
	var sb [stackRank]axis
	sl := sb[:0] // n, operand stride, dst stride
	k := 0
	for a := range opRank {
		if isCollapsed[a] {
			continue
		}
		sl = append(sl, axis{sliceSizes[a], oStrides[a], dStrides[offsetOutputAxes[k]]})
		k++
	}
	sl = simplify(sl)

	// Start indices are clamped to [0, dim - sliceSize] so the whole slice is in bounds.
	var mb, stb [stackRank]int
	maxStart, startStride := scratchInts(mb[:], len(startIndexMap)), scratchInts(stb[:], len(startIndexMap))
	for m, a := range startIndexMap {
		maxStart[m] = max(0, operandDims[a]-sliceSizes[a])
		startStride[m] = oStrides[a]
	}

	units := nestSize(batch)
	if workers <= 1 || units <= 1 {
		gatherRange(dst, operand, indices, ivStride, batch, sl, maxStart, startStride, 0, units)
		return
	}
	// The goroutines get their own copies, so that the scratch above stays on the stack.
	batchG, slG, maxStartG, startStrideG := slices.Clone(batch), slices.Clone(sl), slices.Clone(maxStart), slices.Clone(startStride)
	parallelFor(workers, units, func(lo, hi int) {
		gatherRange(dst, operand, indices, ivStride, batchG, slG, maxStartG, startStrideG, lo, hi)
	})
}

// gatherRange gathers the slices of batch positions [lo, hi): batch walks indices (s) and dst
// (d); the slice nest sl walks the operand (s) and dst (d).
func gatherRange[T any, I Index](dst, operand []T, indices []I, ivStride int, batch, sl []axis, maxStart, startStride []int, lo, hi int) {
	slOuter, slRun := sl[:len(sl)-1], sl[len(sl)-1]
	slRows := nestSize(slOuter)
	var bb, sb [stackRank]int
	bIdx, slIdx := scratchInts(bb[:], len(batch)), scratchInts(sb[:], len(slOuter))
	is, d := rowStart(batch, lo, bIdx)
	for range hi - lo {
		off := 0
		for m, st := range startStride {
			off += clampIndex(indices[is+m*ivStride], maxStart[m]) * st
		}
		copyRows(dst, d, operand, off, slOuter, slRun, slRows, slIdx)
		ds, dd := nextRow(batch, bIdx)
		is += ds
		d += dd
	}
}

// clampIndex clamps v to [0, hi] without overflowing: a uint64 index above MaxInt64 must
// clamp to hi, not wrap negative.
func clampIndex[I Index](v I, hi int) int {
	if v < 0 {
		return 0
	}
	if uint64(v) > uint64(hi) {
		return hi
	}
	return int(v)
}

// indexInRange converts v to int and reports whether it lies in [0, hi].
func indexInRange[I Index](v I, hi int) (int, bool) {
	if v < 0 || hi < 0 || uint64(v) > uint64(hi) {
		return 0, false
	}
	return int(v), true
}

// indexBatchAxes lists the batch axes of a gather's or scatter's indices (every axis but the
// index vector axis) as {size, indices stride, stride in the other array}: they map, in order,
// to the axes of the other array (gather's dst, scatter's updates) that are not window axes. It
// also returns the index vector's stride and length (1 when indexVectorAxis == rank: one
// implicit element). batch is appended to, so callers pass stack storage.
func indexBatchAxes(batch []axis, indicesDims, iStrides []int, indexVectorAxis int, windowAxes, otherStrides []int) ([]axis, int, int) {
	var isWindow [64]bool // Ranks are far below 64; the callers' rank checks panic otherwise.
	for _, a := range windowAxes {
		isWindow[a] = true
	}
	j := 0
	for i, n := range indicesDims {
		if i == indexVectorAxis {
			continue
		}
		for isWindow[j] {
			j++
		}
		batch = append(batch, axis{n, iStrides[i], otherStrides[j]})
		j++
	}
	ivStride, ivLen := 0, 1
	if indexVectorAxis < len(indicesDims) {
		ivStride, ivLen = iStrides[indexVectorAxis], indicesDims[indexVectorAxis]
	}
	return batch, ivStride, ivLen
}
