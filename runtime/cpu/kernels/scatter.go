package kernels

import (
	"fmt"
	"slices"
)

// ScatterSum adds updates into operand at the windows indices point to (XLA scatter semantics
// as GoMLX's ScatterSum documents it). operand is updated in place (the caller passes a copy);
// updates whose window is out of bounds are skipped, as XLA does. Repeated indices accumulate,
// in the order of the updates.
func ScatterSum[T Number, I Index](operand []T, operandDims []int, indices []I, indicesDims []int,
	updates []T, updatesDims []int, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int) {
	scatter(ReduceSum, operand, operandDims, indices, indicesDims, updates, updatesDims, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, workersFor(len(updates)))
}

// ScatterMax is ScatterSum taking the maximum instead of the sum (NaN wins).
func ScatterMax[T Number, I Index](operand []T, operandDims []int, indices []I, indicesDims []int,
	updates []T, updatesDims []int, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int) {
	scatter(ReduceMax, operand, operandDims, indices, indicesDims, updates, updatesDims, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, workersFor(len(updates)))
}

// ScatterMin is ScatterSum taking the minimum instead of the sum (NaN wins).
func ScatterMin[T Number, I Index](operand []T, operandDims []int, indices []I, indicesDims []int,
	updates []T, updatesDims []int, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int) {
	scatter(ReduceMin, operand, operandDims, indices, indicesDims, updates, updatesDims, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, workersFor(len(updates)))
}

// scatter combines updates into operand with op. Parallel work is split along one window axis
// whose operand axis no index addresses: there, window coordinate = operand coordinate for
// every update, so workers own disjoint operand elements and each element still receives its
// updates in update order, whatever the number of workers. Without such an axis (every window
// axis indexed, where windows of different updates may overlap) it runs on one goroutine.
func scatter[T Number, I Index](op ReduceOp, operand []T, operandDims []int, indices []I, indicesDims []int,
	updates []T, updatesDims []int, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, workers int) {
	opRank := len(operandDims)
	if opRank > 64 || len(updatesDims) > 64 {
		panic(fmt.Sprintf("kernels.Scatter: rank above 64 (operand %s, updates %s)", dimsStr(operandDims), dimsStr(updatesDims)))
	}
	if len(updateWindowAxes)+len(insertedWindowAxes) != opRank {
		panic(fmt.Sprintf("kernels.Scatter: updateWindowAxes %s and insertedWindowAxes %s inconsistent with operand rank %d",
			dimsStr(updateWindowAxes), dimsStr(insertedWindowAxes), opRank))
	}
	checkLen("Scatter", "operand", len(operand), product(operandDims))
	checkLen("Scatter", "indices", len(indices), product(indicesDims))
	checkLen("Scatter", "updates", len(updates), product(updatesDims))
	if len(updates) == 0 || len(operand) == 0 {
		return
	}
	var ib, ub, ob [stackRank]int
	iStrides, uStrides, oStrides := rowMajorStrides(ib[:], indicesDims), rowMajorStrides(ub[:], updatesDims), rowMajorStrides(ob[:], operandDims)

	// The batch axes of indices map, in order, to the updates axes that are not window axes.
	var bb [stackRank]axis
	batch, ivStride, ivLen := indexBatchAxes(bb[:0], indicesDims, iStrides, indexVectorAxis, updateWindowAxes, uStrides)
	if len(scatterAxesToOperandAxes) != ivLen || len(batch)+len(updateWindowAxes) != len(updatesDims) {
		panic(fmt.Sprintf("kernels.Scatter: scatterAxesToOperandAxes %s, indices dims %s (index vector axis %d) and updates dims %s are inconsistent",
			dimsStr(scatterAxesToOperandAxes), dimsStr(indicesDims), indexVectorAxis, dimsStr(updatesDims)))
	}

	// The window: operand axes that are not inserted map, in order, to updateWindowAxes.
	var isInserted, isIndexed [64]bool
	for _, a := range insertedWindowAxes {
		isInserted[a] = true
	}
	for _, a := range scatterAxesToOperandAxes {
		isIndexed[a] = true
	}
	var wsb [stackRank]int
	winSize := scratchInts(wsb[:], opRank)
	var wb [stackRank]axis
	win := wb[:0] // n, updates stride, operand stride
	split := -1   // The window axis work is split along.
	k := 0
	for a := range opRank {
		winSize[a] = 1
		if isInserted[a] {
			continue
		}
		u := updateWindowAxes[k]
		k++
		winSize[a] = updatesDims[u]
		if !isIndexed[a] && updatesDims[u] > 1 && (split < 0 || updatesDims[u] > win[split].n) {
			split = len(win)
		}
		win = append(win, axis{updatesDims[u], uStrides[u], oStrides[a]})
	}
	if len(win) == 0 {
		// Every operand axis is inserted: each window is a single element.
		win = append(win, axis{1, 1, 1})
	}
	// A window fits if every start lies in [0, dim - window size].
	var mb, stb [stackRank]int
	maxStart, startStride := scratchInts(mb[:], len(scatterAxesToOperandAxes)), scratchInts(stb[:], len(scatterAxesToOperandAxes))
	for m, a := range scatterAxesToOperandAxes {
		maxStart[m] = operandDims[a] - winSize[a]
		startStride[m] = oStrides[a]
	}

	if split < 0 {
		workers, split = 1, 0
	}
	units := win[split].n
	if workers <= 1 || units <= 1 {
		scatterRange(op, operand, indices, updates, ivStride, batch, win, split, maxStart, startStride, 0, units)
		return
	}
	// The goroutines get their own copies, so that the scratch above stays on the stack.
	batchG, winG, maxStartG, startStrideG := slices.Clone(batch), slices.Clone(win), slices.Clone(maxStart), slices.Clone(startStride)
	parallelFor(workers, units, func(lo, hi int) {
		scatterRange(op, operand, indices, updates, ivStride, batchG, winG, split, maxStartG, startStrideG, lo, hi)
	})
}

// scatterRange applies every update to window coordinates [lo, hi) along window axis split:
// batch walks indices (s) and updates (d); the window nest win walks updates (s) and the
// operand (d).
func scatterRange[T Number, I Index](op ReduceOp, operand []T, indices []I, updates []T, ivStride int,
	batch, win []axis, split int, maxStart, startStride []int, lo, hi int) {
	var pb [stackRank]axis
	part := append(pb[:0], win...)
	part[split].n = hi - lo
	uOff, oOff := lo*win[split].s, lo*win[split].d
	part = simplify(part)
	outer, run := part[:len(part)-1], part[len(part)-1]
	rows := nestSize(outer)
	var bb, wb [stackRank]int
	bIdx, wIdx := scratchInts(bb[:], len(batch)), scratchInts(wb[:], len(outer))
	is, us := 0, 0
	for range nestSize(batch) {
		off, ok := 0, true
		for m, st := range startStride {
			v, in := indexInRange(indices[is+m*ivStride], maxStart[m])
			ok = ok && in
			off += v * st
		}
		if ok {
			combineRows(op, operand, off+oOff, updates, us+uOff, outer, run, rows, wIdx)
		}
		ds, dd := nextRow(batch, bIdx)
		is += ds
		us += dd
	}
}

// combineRows applies op(dst, src) over rows consecutive rows of a nest (as copyRows).
func combineRows[T Number](op ReduceOp, dst []T, d int, src []T, s int, outer []axis, run axis, rows int, idx []int) {
	for range rows {
		if run.s == 1 && run.d == 1 {
			combineRun(op, dst[d:d+run.n], src[s:s+run.n])
		} else {
			combineStrided(op, dst, d, src, s, run)
		}
		ds, dd := nextRow(outer, idx)
		s += ds
		d += dd
	}
}

// combineStrided is combineRun over a run with arbitrary strides (s into src, d into dst).
func combineStrided[T Number](op ReduceOp, dst []T, d int, src []T, s int, a axis) {
	switch op {
	case ReduceSum:
		for range a.n {
			dst[d] += src[s]
			d, s = d+a.d, s+a.s
		}
	case ReduceProduct:
		for range a.n {
			dst[d] *= src[s]
			d, s = d+a.d, s+a.s
		}
	case ReduceMax:
		for range a.n {
			dst[d] = max(dst[d], src[s])
			d, s = d+a.d, s+a.s
		}
	case ReduceMin:
		for range a.n {
			dst[d] = min(dst[d], src[s])
			d, s = d+a.d, s+a.s
		}
	default:
		panic("kernels: unknown " + op.String())
	}
}
