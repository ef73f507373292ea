package cpu

import (
	"slices"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"stx.dev/stx/runtime/cpu/blas"
)

// Sums of products computed in place. A chunked LM head's weight gradient is a sum over the
// chunks, acc + G₁ᵀ·h₁ + G₂ᵀ·h₂ + … (runtime/chunked.go): unfused, each product writes a
// [vocab, d] array of its own (544 MiB at Qwen2.5-0.5B's vocabulary, storage touched afresh)
// which an Add then streams through with the sum. Compile turns Add(acc, DotGeneral(a, b)),
// where nothing else reads the product, into one step that runs the GEMM with β = 1 on acc's
// storage: C = a·b + C.
//
// The bits are those of the unfused program as long as every element of the product is summed
// in one pass over K: OpenBLAS's kernels then add each element's sum to C once, as the Add
// did (with β = 0 they add it to zeros). Over K split into panels, C would take the partial
// sums one at a time, rounding differently. dotAccMaxK keeps K short enough for one panel
// (OpenBLAS's GEMM_Q, a few hundred for its x86-64 kernels); the chunked head's products
// contract its 256 rows. The pure-Go GEMM (no OpenBLAS loaded) adds each term to C as it goes,
// so with it nothing is fused. TestDotAccumulateSameBits checks the bits on the kernels in use.

// dotAccMaxK is the longest contraction fused.
const dotAccMaxK = 256

// dotAcc is the data of a fused step: inputs are (acc, lhs, rhs); the product's plan.
type dotAcc struct {
	plan *dotPlan
}

// dotAccumulable reports whether product d can be summed into an accumulator of its shape
// in place: float32 (not a bfloat16 product, bf16.go), one item run as one GEMM on the cores
// (sgemmBatch's gemmEach path), K within dotAccMaxK.
func dotAccumulable(d *node) bool {
	if d.op != backends.OpTypeDotGeneral || d.shape.DType != dtypes.Float32 {
		return false
	}
	p, ok := d.data.(*dotPlan)
	return ok && blas.Available() && p.batch == 1 && p.k > 0 && p.k <= dotAccMaxK && p.m > 0 && p.n > 0 &&
		chooseGemmPath(p.transA, p.batch, p.m, p.n, p.k) == gemmEach
}

// fuseDotAccumulate returns the program's nodes with each Add(acc, product) that qualifies
// (see above) replaced by a dotAcc step; needed marks the nodes the outputs depend on.
func fuseDotAccumulate(nodes []*node, needed []bool, outputs []*node) []*node {
	readers := countReaders(nodes, needed, outputs)
	prog, cloned := nodes, false
	for i, n := range nodes {
		if !needed[i] || n.op != backends.OpTypeAdd || n.shape.DType != dtypes.Float32 || len(n.inputs) != 2 {
			continue
		}
		x, y := nodes[n.inputs[0].idx], nodes[n.inputs[1].idx]
		if !x.shape.Equal(n.shape) || !y.shape.Equal(n.shape) {
			continue // a broadcasting Add
		}
		// The product is the second operand if it can be (the running sum comes first in the
		// head's acc + G·h), else the first. Add commutes exactly, so either order gives the
		// same bits.
		acc, d := x, y
		if readers[d.idx] != 1 || !dotAccumulable(d) {
			acc, d = y, x
			if readers[d.idx] != 1 || !dotAccumulable(d) {
				continue
			}
		}
		if !cloned {
			prog, cloned = slices.Clone(nodes), true
		}
		c := *n
		c.inputs = []*node{acc, d.inputs[0], d.inputs[1]}
		c.data = &dotAcc{plan: d.data.(*dotPlan)}
		prog[i] = &c
	}
	return prog
}

// execDotAcc computes acc + lhs·rhs: into acc's storage when the step owns it, else into a new
// buffer holding a copy of acc.
func execDotAcc(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	p := n.data.(*dotAcc).plan
	out := in[0]
	if !owned[0] || overlaps(in[0].flat.([]float32), in[1].flat.([]float32)) || overlaps(in[0].flat.([]float32), in[2].flat.([]float32)) {
		out = r.newBuffer(n.shape)
		copy(out.flat.([]float32), in[0].flat.([]float32))
	}
	lhs, rhs := in[1].flat.([]float32), in[2].flat.([]float32)
	a, relA := transposed(r, lhs, p.lhsDims, p.lhsPerm)
	defer relA()
	b, relB := transposed(r, rhs, p.rhsDims, p.rhsPerm)
	defer relB()
	lda, ldb, aOff, bOff := p.operands()
	a, b = a[itemOffset(aOff, 0, 0):], b[itemOffset(bOff, 0, 0):] // one item (dotAccumulable)
	sgemm := blas.Sgemm
	if r.oneThread {
		sgemm = blas.SgemmOneThread
	}
	sgemm(p.transA, p.transB, p.m, p.n, p.k, 1, a, lda, b, ldb, 1, out.flat.([]float32), p.n)
	return out, nil
}

// overlaps reports whether two slices share storage (an operand aliasing the accumulator
// would be read while it is written).
func overlaps(x, y []float32) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	x0, y0 := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return x0 < y0+uintptr(len(y))*4 && y0 < x0+uintptr(len(x))*4
}
