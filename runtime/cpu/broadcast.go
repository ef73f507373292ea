package cpu

import "github.com/gomlx/gomlx/pkg/core/shapes"

// bcastPlan is the iteration plan of a binary op under shapeinference.BinaryOp's implicit
// broadcasting: either operand may be a scalar, otherwise ranks are equal and each dimension
// matches or is 1. Adjacent axes with the same broadcast pattern are merged, so the common
// cases ([B,T,D]+[1,1,D], [B,T,D]*[B,T,1]) become a short outer loop over a contiguous inner
// block.
type bcastPlan struct {
	kind bcastKind
	// For bcastGeneral: merged output dims, the operands' strides over them (0 where
	// broadcast), and how the innermost (last) merged axis combines the operands.
	dims           []int
	lstr, rstr     []int
	inner          bcastKind // bcastSame, bcastLhsScalar, bcastRhsScalar or bcastBothScalar along the inner axis
	innerLen, size int
	// The outer merged axes (all but the last) and the operands' strides along them, as the
	// C kernels take them (vec.go).
	outerDims, outerL, outerR []int64
}

type bcastKind int

const (
	bcastSame      bcastKind = iota // same number of elements: elementwise over the flat slices
	bcastLhsScalar                  // lhs has one element
	bcastRhsScalar                  // rhs has one element
	bcastGeneral
	// bcastBothScalar: along the inner axis both operands repeat one element. Only broadcast
	// fusion (fuse.go) makes such plans: the op's own operands always cover its output.
	bcastBothScalar
)

func newBcastPlan(lhs, rhs, out shapes.Shape) *bcastPlan {
	size := out.Size()
	p := &bcastPlan{size: size}
	switch {
	case size == 0 || (lhs.Size() == size && rhs.Size() == size):
		p.kind = bcastSame
		return p
	case lhs.Size() == 1 && rhs.Size() == size:
		p.kind = bcastLhsScalar
		return p
	case rhs.Size() == 1 && lhs.Size() == size:
		p.kind = bcastRhsScalar
		return p
	}
	p.kind = bcastGeneral
	type ax struct {
		d      int
		lb, rb bool
	}
	var axes []ax
	for i, d := range out.Dimensions {
		if d == 1 {
			continue
		}
		lb := lhs.Rank() == 0 || lhs.Dimensions[i] == 1
		rb := rhs.Rank() == 0 || rhs.Dimensions[i] == 1
		if n := len(axes); n > 0 && axes[n-1].lb == lb && axes[n-1].rb == rb {
			axes[n-1].d *= d
			continue
		}
		axes = append(axes, ax{d, lb, rb})
	}
	n := len(axes)
	p.dims = make([]int, n)
	p.lstr = make([]int, n)
	p.rstr = make([]int, n)
	ls, rs := 1, 1
	for i := n - 1; i >= 0; i-- {
		p.dims[i] = axes[i].d
		if !axes[i].lb {
			p.lstr[i] = ls
			ls *= axes[i].d
		}
		if !axes[i].rb {
			p.rstr[i] = rs
			rs *= axes[i].d
		}
	}
	for i := range n - 1 {
		p.outerDims = append(p.outerDims, int64(p.dims[i]))
		p.outerL = append(p.outerL, int64(p.lstr[i]))
		p.outerR = append(p.outerR, int64(p.rstr[i]))
	}
	last := axes[n-1]
	p.innerLen = last.d
	switch {
	case last.lb && last.rb:
		p.inner = bcastBothScalar
	case last.lb:
		p.inner = bcastLhsScalar
	case last.rb:
		p.inner = bcastRhsScalar
	default:
		p.inner = bcastSame
	}
	return p
}

// applyBinary runs a binary kernel over the plan: vv combines two slices, vs a slice and a
// scalar, sv a scalar and a slice. Large outputs are split across cores.
func applyBinary[T, O any](p *bcastPlan, out []O, a, b []T,
	vv func(out []O, a, b []T), vs func(out []O, a []T, b T), sv func(out []O, a T, b []T)) {
	switch p.kind {
	case bcastSame:
		parallelFor(p.size, p.size, func(lo, hi int) { vv(out[lo:hi], a[lo:hi], b[lo:hi]) })
		return
	case bcastLhsScalar:
		s := a[0]
		parallelFor(p.size, p.size, func(lo, hi int) { sv(out[lo:hi], s, b[lo:hi]) })
		return
	case bcastRhsScalar:
		s := b[0]
		parallelFor(p.size, p.size, func(lo, hi int) { vs(out[lo:hi], a[lo:hi], s) })
		return
	}
	parallelFor(p.size/p.innerLen, p.size, func(lo, hi int) { applyRows(p, out, a, b, vv, vs, sv, lo, hi) })
}

// applyRows runs rows [lo, hi) of a bcastGeneral plan: row o writes out[o·innerLen:(o+1)·innerLen].
func applyRows[T, O any](p *bcastPlan, out []O, a, b []T,
	vv func(out []O, a, b []T), vs func(out []O, a []T, b T), sv func(out []O, a T, b []T), lo, hi int) {
	inner := p.innerLen
	nd := len(p.dims) - 1
	// Mixed-radix counter over the outer merged axes, started at lo.
	var idxBuf [8]int
	idx := idxBuf[:0]
	if nd > len(idxBuf) {
		idx = make([]int, 0, nd)
	}
	idx = idx[:nd]
	rem := lo
	la, lb := 0, 0
	for i := nd - 1; i >= 0; i-- {
		idx[i] = rem % p.dims[i]
		rem /= p.dims[i]
		la += idx[i] * p.lstr[i]
		lb += idx[i] * p.rstr[i]
	}
	for o := lo; o < hi; o++ {
		dst := out[o*inner : (o+1)*inner]
		switch p.inner {
		case bcastSame:
			vv(dst, a[la:la+inner], b[lb:lb+inner])
		case bcastLhsScalar:
			sv(dst, a[la], b[lb:lb+inner])
		case bcastBothScalar:
			// One result, repeated.
			vs(dst[:1], a[la:la+1], b[lb])
			for i := 1; i < len(dst); i++ {
				dst[i] = dst[0]
			}
		default:
			vs(dst, a[la:la+inner], b[lb])
		}
		for i := nd - 1; i >= 0; i-- {
			idx[i]++
			la += p.lstr[i]
			lb += p.rstr[i]
			if idx[i] < p.dims[i] {
				break
			}
			la -= p.dims[i] * p.lstr[i]
			lb -= p.dims[i] * p.rstr[i]
			idx[i] = 0
		}
	}
}
