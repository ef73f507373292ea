package kernels

import (
	"math/rand/v2"
	"slices"
)

// randGatherSpec draws a random valid Gather configuration: random start-index map (any order),
// collapsed axes, slice sizes, batch rank, index-vector position (including the implicit one)
// and offset output axes.
func randGatherSpec(rng *rand.Rand) gatherSpec {
	r := 1 + rng.IntN(3)
	g := gatherSpec{operandDims: randDims(rng, r, 5, false)}
	m := 1 + rng.IntN(r)
	g.startIndexMap = rng.Perm(r)[:m]
	g.sliceSizes = make([]int, r)
	for a, d := range g.operandDims {
		switch {
		case rng.IntN(3) == 0:
			g.sliceSizes[a] = 1
			g.collapsedSliceAxes = append(g.collapsedSliceAxes, a)
		case rng.IntN(20) == 0:
			g.sliceSizes[a] = 0
		default:
			g.sliceSizes[a] = 1 + rng.IntN(d)
		}
	}
	batchRank := rng.IntN(3)
	batchDims := randDims(rng, batchRank, 4, true)
	if m == 1 && rng.IntN(3) == 0 {
		g.indexVectorAxis = batchRank
		g.indicesDims = batchDims
	} else {
		g.indexVectorAxis = rng.IntN(batchRank + 1)
		g.indicesDims = slices.Insert(slices.Clone(batchDims), g.indexVectorAxis, m)
	}
	nOff := r - len(g.collapsedSliceAxes)
	g.offsetOutputAxes = rng.Perm(batchRank + nOff)[:nOff]
	slices.Sort(g.offsetOutputAxes)
	return g
}

// randScatterSpec draws a random valid Scatter configuration.
func randScatterSpec(rng *rand.Rand) scatterSpec {
	r := 1 + rng.IntN(3)
	s := scatterSpec{operandDims: randDims(rng, r, 5, false)}
	s.insertedWindowAxes = randSubset(rng, r)
	m := 1 + rng.IntN(r)
	s.scatterAxesToOperandAxes = rng.Perm(r)[:m]
	var winDims []int
	for a, d := range s.operandDims {
		if slices.Contains(s.insertedWindowAxes, a) {
			continue
		}
		w := 1 + rng.IntN(d)
		if rng.IntN(20) == 0 {
			w = 0
		}
		winDims = append(winDims, w)
	}
	batchRank := rng.IntN(3)
	batchDims := randDims(rng, batchRank, 4, true)
	if m == 1 && rng.IntN(3) == 0 {
		s.indexVectorAxis = batchRank
		s.indicesDims = batchDims
	} else {
		s.indexVectorAxis = rng.IntN(batchRank + 1)
		s.indicesDims = slices.Insert(slices.Clone(batchDims), s.indexVectorAxis, m)
	}
	uRank := batchRank + len(winDims)
	s.updateWindowAxes = rng.Perm(uRank)[:len(winDims)]
	slices.Sort(s.updateWindowAxes)
	s.updatesDims = make([]int, uRank)
	wi, bi := 0, 0
	for a := range uRank {
		if slices.Contains(s.updateWindowAxes, a) {
			s.updatesDims[a] = winDims[wi]
			wi++
		} else {
			s.updatesDims[a] = batchDims[bi]
			bi++
		}
	}
	return s
}

// windowSizes returns the scatter window size along each operand axis.
func (s scatterSpec) windowSizes() []int {
	w := make([]int, len(s.operandDims))
	k := 0
	for a := range s.operandDims {
		w[a] = 1
		if !slices.Contains(s.insertedWindowAxes, a) {
			w[a] = s.updatesDims[s.updateWindowAxes[k]]
			k++
		}
	}
	return w
}

// randScatterIndices fills indices for s: with inBounds, every window fits; otherwise values
// range one past each side so some windows fall out of bounds.
func randScatterIndices(rng *rand.Rand, s scatterSpec, inBounds bool) []int32 {
	idx := make([]int32, product(s.indicesDims))
	w := s.windowSizes()
	ii := make([]int, len(s.indicesDims))
	for f := range idx {
		unravel(f, s.indicesDims, ii)
		m := 0
		if s.indexVectorAxis < len(s.indicesDims) {
			m = ii[s.indexVectorAxis]
		}
		a := s.scatterAxesToOperandAxes[m]
		hi := s.operandDims[a] - w[a]
		if inBounds {
			idx[f] = int32(rng.IntN(hi + 1))
		} else {
			idx[f] = int32(rng.IntN(hi+3) - 1)
		}
	}
	return idx
}

// randGatherIndices returns indices for g in [-2, maxDim+2], so clamping is exercised.
func randGatherIndices(rng *rand.Rand, g gatherSpec) []int32 {
	idx := make([]int32, product(g.indicesDims))
	for i := range idx {
		idx[i] = int32(rng.IntN(10) - 2)
	}
	return idx
}
