package kernels

// Naive, index-by-index references of every kernel: one output (or input) element at a time,
// straight from the XLA definitions, with float64 accumulation for reductions.

import (
	"math"
	"math/rand/v2"
	"slices"
)

func unravel(flat int, dims, idx []int) {
	for i := len(dims) - 1; i >= 0; i-- {
		idx[i] = flat % dims[i]
		flat /= dims[i]
	}
}

func ravel(idx, dims []int) int {
	f := 0
	for i := range dims {
		f = f*dims[i] + idx[i]
	}
	return f
}

func refTranspose[T any](src []T, srcDims, perm []int) []T {
	dstDims := make([]int, len(perm))
	for i, p := range perm {
		dstDims[i] = srcDims[p]
	}
	dst := make([]T, product(dstDims))
	di, si := make([]int, len(perm)), make([]int, len(perm))
	for f := range dst {
		unravel(f, dstDims, di)
		for i, p := range perm {
			si[p] = di[i]
		}
		dst[f] = src[ravel(si, srcDims)]
	}
	return dst
}

func refBroadcast[T any](src []T, srcDims, dstDims, bAxes []int) []T {
	dst := make([]T, product(dstDims))
	di, si := make([]int, len(dstDims)), make([]int, len(srcDims))
	for f := range dst {
		unravel(f, dstDims, di)
		for i, a := range bAxes {
			si[i] = 0
			if srcDims[i] != 1 {
				si[i] = di[a]
			}
		}
		dst[f] = src[ravel(si, srcDims)]
	}
	return dst
}

func sliceDims(starts, limits, strides []int) []int {
	d := make([]int, len(starts))
	for i := range starts {
		d[i] = max(0, (limits[i]-starts[i]+strides[i]-1)/strides[i])
	}
	return d
}

func refSlice[T any](src []T, srcDims, starts, limits, strides []int) []T {
	dstDims := sliceDims(starts, limits, strides)
	dst := make([]T, product(dstDims))
	di, si := make([]int, len(dstDims)), make([]int, len(dstDims))
	for f := range dst {
		unravel(f, dstDims, di)
		for i := range di {
			si[i] = starts[i] + di[i]*strides[i]
		}
		dst[f] = src[ravel(si, srcDims)]
	}
	return dst
}

func refConcat[T any](srcs [][]T, srcDims [][]int, axis int) ([]T, []int) {
	dstDims := slices.Clone(srcDims[0])
	dstDims[axis] = 0
	for _, d := range srcDims {
		dstDims[axis] += d[axis]
	}
	dst := make([]T, product(dstDims))
	di := make([]int, len(dstDims))
	for f := range dst {
		unravel(f, dstDims, di)
		c := di[axis]
		for k, d := range srcDims {
			if c < d[axis] {
				si := slices.Clone(di)
				si[axis] = c
				dst[f] = srcs[k][ravel(si, d)]
				break
			}
			c -= d[axis]
		}
	}
	return dst, dstDims
}

// gatherSpec is one Gather call's configuration.
type gatherSpec struct {
	operandDims, indicesDims                                        []int
	indexVectorAxis                                                 int
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int
}

// dstDims follows GoMLX's shapeinference.Gather.
func (g gatherSpec) dstDims() []int {
	batchRank := len(g.indicesDims) - 1
	if g.indexVectorAxis == len(g.indicesDims) {
		batchRank++
	}
	out := make([]int, batchRank+len(g.offsetOutputAxes))
	var offsetDims []int
	for a, s := range g.sliceSizes {
		if !slices.Contains(g.collapsedSliceAxes, a) {
			offsetDims = append(offsetDims, s)
		}
	}
	oi, bi := 0, 0
	for a := range out {
		if slices.Contains(g.offsetOutputAxes, a) {
			out[a] = offsetDims[oi]
			oi++
			continue
		}
		if bi == g.indexVectorAxis {
			bi++
		}
		out[a] = g.indicesDims[bi]
		bi++
	}
	return out
}

func refGather[T any, I Index](g gatherSpec, operand []T, indices []I) []T {
	dstDims := g.dstDims()
	dst := make([]T, product(dstDims))
	oi := make([]int, len(dstDims))
	ivRank := len(g.indicesDims)
	virtual := g.indexVectorAxis == ivRank
	for f := range dst {
		unravel(f, dstDims, oi)
		// Batch coordinates: output axes that are not offset axes, in order.
		var batch []int
		var offs []int
		for a, v := range oi {
			if slices.Contains(g.offsetOutputAxes, a) {
				offs = append(offs, v)
			} else {
				batch = append(batch, v)
			}
		}
		opIdx := make([]int, len(g.operandDims))
		for m, a := range g.startIndexMap {
			var ii []int
			if virtual {
				ii = slices.Clone(batch)
			} else {
				ii = slices.Insert(slices.Clone(batch), g.indexVectorAxis, m)
			}
			v := int64(indices[ravel(ii, g.indicesDims)])
			hi := int64(g.operandDims[a] - g.sliceSizes[a])
			opIdx[a] = int(min(max(v, 0), hi))
		}
		k := 0
		for a := range g.operandDims {
			if slices.Contains(g.collapsedSliceAxes, a) {
				continue
			}
			opIdx[a] += offs[k]
			k++
		}
		dst[f] = operand[ravel(opIdx, g.operandDims)]
	}
	return dst
}

// scatterSpec is one Scatter call's configuration.
type scatterSpec struct {
	operandDims, indicesDims, updatesDims                          []int
	indexVectorAxis                                                int
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int
}

func refScatter[T Number, I Index](s scatterSpec, op ReduceOp, operand []T, indices []I, updates []T) []T {
	out := slices.Clone(operand)
	ui := make([]int, len(s.updatesDims))
	virtual := s.indexVectorAxis == len(s.indicesDims)
	// Window sizes per operand axis.
	winSize := make([]int, len(s.operandDims))
	k := 0
	for a := range s.operandDims {
		winSize[a] = 1
		if !slices.Contains(s.insertedWindowAxes, a) {
			winSize[a] = s.updatesDims[s.updateWindowAxes[k]]
			k++
		}
	}
	// Updates apply batch position by batch position, each window in row-major order: the
	// order that fixes float sums over repeated and overlapping indices.
	var batchDims, winDims []int
	for a, d := range s.updatesDims {
		if slices.Contains(s.updateWindowAxes, a) {
			winDims = append(winDims, d)
		} else {
			batchDims = append(batchDims, d)
		}
	}
	order := make([]int, len(updates))
	for f := range updates {
		unravel(f, s.updatesDims, ui)
		var b, w []int
		for a, v := range ui {
			if slices.Contains(s.updateWindowAxes, a) {
				w = append(w, v)
			} else {
				b = append(b, v)
			}
		}
		order[ravel(b, batchDims)*product(winDims)+ravel(w, winDims)] = f
	}
	for _, f := range order {
		unravel(f, s.updatesDims, ui)
		var batch, win []int
		for a, v := range ui {
			if slices.Contains(s.updateWindowAxes, a) {
				win = append(win, v)
			} else {
				batch = append(batch, v)
			}
		}
		start := make([]int, len(s.operandDims))
		inBounds := true
		for m, a := range s.scatterAxesToOperandAxes {
			var ii []int
			if virtual {
				ii = slices.Clone(batch)
			} else {
				ii = slices.Insert(slices.Clone(batch), s.indexVectorAxis, m)
			}
			v := int64(indices[ravel(ii, s.indicesDims)])
			if v < 0 || v+int64(winSize[a]) > int64(s.operandDims[a]) {
				inBounds = false
			}
			start[a] = int(v)
		}
		if !inBounds {
			continue
		}
		k := 0
		for a := range s.operandDims {
			if !slices.Contains(s.insertedWindowAxes, a) {
				start[a] += win[k]
				k++
			}
		}
		o := ravel(start, s.operandDims)
		u := updates[f]
		switch op {
		case ReduceSum:
			out[o] += u
		case ReduceMax:
			out[o] = refMax(out[o], u)
		case ReduceMin:
			out[o] = refMin(out[o], u)
		}
	}
	return out
}

func isNaNAny[T Number](x T) bool { return x != x }

func refMax[T Number](a, b T) T {
	if isNaNAny(a) || isNaNAny(b) {
		return T(math.NaN())
	}
	if b > a {
		return b
	}
	return a
}

func refMin[T Number](a, b T) T {
	if isNaNAny(a) || isNaNAny(b) {
		return T(math.NaN())
	}
	if b < a {
		return b
	}
	return a
}

// refReduce reduces in float64 (sums and products), returning float64 results and, per
// output, the sum of |x| (to scale the tolerance of float32 sums).
func refReduce[T Number](src []T, srcDims, axes []int, op ReduceOp) (out []float64, absSum []float64, dstDims []int) {
	for i, d := range srcDims {
		if !slices.Contains(axes, i) {
			dstDims = append(dstDims, d)
		}
	}
	out = make([]float64, product(dstDims))
	absSum = make([]float64, len(out))
	for i := range out {
		switch op {
		case ReduceSum:
			out[i] = 0
		case ReduceProduct:
			out[i] = 1
		case ReduceMax:
			out[i] = float64(lowest[T]())
		case ReduceMin:
			out[i] = float64(highest[T]())
		}
	}
	si := make([]int, len(srcDims))
	di := make([]int, 0, len(dstDims))
	for f, x := range src {
		unravel(f, srcDims, si)
		di = di[:0]
		for i, v := range si {
			if !slices.Contains(axes, i) {
				di = append(di, v)
			}
		}
		o := ravel(di, dstDims)
		v := float64(x)
		absSum[o] += math.Abs(v)
		switch op {
		case ReduceSum:
			out[o] += v
		case ReduceProduct:
			out[o] *= v
		case ReduceMax:
			out[o] = refMax(out[o], v)
		case ReduceMin:
			out[o] = refMin(out[o], v)
		}
	}
	return out, absSum, dstDims
}

func refArgMinMax[T Number](src []T, srcDims []int, axis int, isMin bool) []int {
	outer, n, inner := product(srcDims[:axis]), srcDims[axis], product(srcDims[axis+1:])
	dst := make([]int, outer*inner)
	for o := range outer {
		for k := range inner {
			best := -1
			for a := range n {
				v := src[(o*n+a)*inner+k]
				if isNaNAny(v) {
					best = a
					break
				}
				if best < 0 {
					best = a
					continue
				}
				b := src[(o*n+best)*inner+k]
				if (isMin && v < b) || (!isMin && v > b) {
					best = a
				}
			}
			dst[o*inner+k] = max(best, 0)
		}
	}
	return dst
}

func padDims(srcDims []int, axes []PadAxis) []int {
	d := make([]int, len(srcDims))
	for i, n := range srcDims {
		d[i] = axes[i].Start + axes[i].End + n + max(n-1, 0)*axes[i].Interior
	}
	return d
}

func refPad[T any](src []T, srcDims []int, fill T, axes []PadAxis) []T {
	dstDims := padDims(srcDims, axes)
	dst := make([]T, product(dstDims))
	for i := range dst {
		dst[i] = fill
	}
	si, di := make([]int, len(srcDims)), make([]int, len(srcDims))
	for f := range src {
		unravel(f, srcDims, si)
		ok := true
		for i := range si {
			di[i] = axes[i].Start + si[i]*(axes[i].Interior+1)
			ok = ok && di[i] >= 0 && di[i] < dstDims[i]
		}
		if ok {
			dst[ravel(di, dstDims)] = src[f]
		}
	}
	return dst
}

func refReverse[T any](src []T, dims, axes []int) []T {
	dst := make([]T, len(src))
	idx := make([]int, len(dims))
	for f := range src {
		unravel(f, dims, idx)
		for _, a := range axes {
			idx[a] = dims[a] - 1 - idx[a]
		}
		dst[ravel(idx, dims)] = src[f]
	}
	return dst
}

// randDims returns rank dims in [1, maxDim], with a 10% chance each of being 0 when allowZero.
func randDims(rng *rand.Rand, rank, maxDim int, allowZero bool) []int {
	d := make([]int, rank)
	for i := range d {
		d[i] = 1 + rng.IntN(maxDim)
		if allowZero && rng.IntN(10) == 0 {
			d[i] = 0
		}
	}
	return d
}

// randData returns n distinct-ish float64 values (copies are compared bit for bit).
func randData(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

// permutations lists every permutation of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for pos := 0; pos <= len(p); pos++ {
			out = append(out, slices.Insert(slices.Clone(p), pos, n-1))
		}
	}
	return out
}

// randSubset returns a random subset of 0..n-1, sorted.
func randSubset(rng *rand.Rand, n int) []int {
	var s []int
	for i := range n {
		if rng.IntN(2) == 0 {
			s = append(s, i)
		}
	}
	return s
}
