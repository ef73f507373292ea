package cpu

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"stx.dev/stx/runtime/cpu/blas"
)

// BFloat16 in the cpu backend.
//
// A model computing in bfloat16 (stx's mixed precision: runtime.Model.ComputeDType) converts
// the operands of its matrix products to bfloat16, multiplies them, and converts the product
// back to float32 at once; everything else stays float32. So the backend stores bfloat16
// tensors ([]bfloat16.BFloat16), converts float32 ↔ bfloat16 (to bfloat16 rounding to nearest
// even, as XLA and PyTorch do; GoMLX's bfloat16.FromFloat32 truncates), multiplies bfloat16
// operands with float32 accumulation and rounds the product to bfloat16 (the node's dtype), and
// moves bfloat16 data (transpose, broadcast, slice, concatenate, gather, pad, reverse) as any
// other. Any other op that meets a bfloat16 operand or result (an autodiff sum of two bfloat16
// adjoints, say) runs in float32 on widened operands and rounds its result: XLA's CPU compiler
// does the same.
//
// The product (dotBFloat16) uses OpenBLAS's cblas_sbgemm where that is fast (blas.SbgemmFast:
// the library exports it and the CPU has AVX512-BF16 or AMX-BF16); elsewhere it widens both
// operands to float32 and runs the float32 product, whose sums are the same (a product of two
// bfloat16 values is exact in float32) at float32 speed.

type bf16 = bfloat16.BFloat16

// bf16Native are the ops whose executors handle bfloat16 themselves; the others are run by
// upcastBF16 when a bfloat16 tensor reaches them.
var bf16Native = []backends.OpType{
	backends.OpTypeParameter, backends.OpTypeConstant, backends.OpTypeIdentity, backends.OpTypeReshape,
	backends.OpTypeConvertDType, backends.OpTypeDotGeneral,
	backends.OpTypeTranspose, backends.OpTypeBroadcastInDim, backends.OpTypeSlice, backends.OpTypeConcatenate,
	backends.OpTypeGather, backends.OpTypePad, backends.OpTypeReverse,
}

// touchesBF16 reports whether a node reads or produces bfloat16.
func touchesBF16(n *node) bool {
	if n.shape.DType == dtypes.BFloat16 {
		return true
	}
	for _, in := range n.inputs {
		if in.shape.DType == dtypes.BFloat16 {
			return true
		}
	}
	return false
}

// needsUpcast reports whether a node's executor must be wrapped by upcastBF16.
func needsUpcast(n *node) bool {
	return touchesBF16(n) && !slices.Contains(bf16Native, n.op)
}

// upcastBF16 runs fn on float32 copies of the bfloat16 inputs, as a node of float32 in place
// of bfloat16, and rounds a bfloat16 node's result.
func upcastBF16(fn execFn) execFn {
	return func(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
		n32 := *n
		n32.shape = n.shape.Clone()
		if n32.shape.DType == dtypes.BFloat16 {
			n32.shape.DType = dtypes.Float32
		}
		// The float32 result is scratch where the node is bfloat16, even if its output escapes.
		inner := *r
		inner.escapes = inner.escapes && n.shape.DType != dtypes.BFloat16
		in32 := make([]*Buffer, len(in))
		owned32 := make([]bool, len(in))
		widened := make([]bool, len(in))
		for i, b := range in {
			x, ok := b.flat.([]bf16)
			if !ok {
				in32[i], owned32[i] = b, owned[i]
				continue
			}
			shape := b.shape.Clone()
			shape.DType = dtypes.Float32
			w := r.pool.newBuffer(shape)
			widenBF16(r, w.flat.([]float32), x)
			// An escaping float32 result must not be written into a mapped copy.
			in32[i], owned32[i], widened[i] = w, !(inner.escapes && w.mem != nil), true
		}
		out, err := fn(&inner, &n32, in32, owned32)
		for i, b := range in32 {
			if widened[i] && b != out {
				r.pool.put(dtypes.Float32, b.flat)
			}
		}
		if err != nil || n.shape.DType != dtypes.BFloat16 {
			return out, err
		}
		res := r.newBuffer(n.shape)
		narrowBF16(r, res.flat.([]bf16), out.flat.([]float32))
		// out is this step's own: a widened input it wrote in place, or a fresh buffer (an owned
		// float32 input cannot have a bfloat16 node's size and dtype).
		r.pool.put(dtypes.Float32, out.flat)
		return res, nil
	}
}

// RoundBF16 rounds a float32 to the nearest bfloat16 (ties to even; NaN stays a quiet NaN,
// overflow goes to ±Inf), as XLA and PyTorch convert.
func RoundBF16(f float32) bfloat16.BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return bfloat16.BFloat16(b>>16 | 0x40)
	}
	return bfloat16.BFloat16((b + 0x7fff + (b>>16)&1) >> 16)
}

// RoundToBF16 sets dst[i] to src[i] rounded to the nearest bfloat16 value (RoundBF16), kept
// as a float32; dst may be src.
func RoundToBF16(dst, src []float32) {
	dst = dst[:len(src)]
	if vecRoundBF16(dst, src) {
		return
	}
	for i, f := range src {
		b := math.Float32bits(f)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = math.Float32frombits((b | 0x400000) &^ 0xffff)
			continue
		}
		dst[i] = math.Float32frombits((b + 0x7fff + (b>>16)&1) &^ 0xffff)
	}
}

// items runs fn over [0, n) spread over the cores (parallelFor), or on the calling goroutine
// when the step runs beside another (r.oneThread).
func (r *execution) items(n, work int, fn func(lo, hi int)) {
	if r != nil && r.oneThread {
		fn(0, n)
		return
	}
	parallelFor(n, work, fn)
}

// widenBF16 sets dst to src as float32 (exact).
func widenBF16(r *execution, dst []float32, src []bf16) {
	r.items(len(src), len(src), func(lo, hi int) {
		if !vecWidenBF16(dst[lo:hi], src[lo:hi]) {
			for i := lo; i < hi; i++ {
				dst[i] = math.Float32frombits(uint32(src[i]) << 16)
			}
		}
	})
}

// narrowBF16 sets dst to src rounded to bfloat16 (RoundBF16).
func narrowBF16(r *execution, dst []bf16, src []float32) {
	r.items(len(src), len(src), func(lo, hi int) {
		if !vecNarrowBF16(dst[lo:hi], src[lo:hi]) {
			for i := lo; i < hi; i++ {
				dst[i] = RoundBF16(src[i])
			}
		}
	})
}

// bf16Bits views bfloat16 values as their bit patterns.
func bf16Bits(x []bf16) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.SliceData(x)), len(x))
}

// convertBF16 runs a ConvertDType from or to bfloat16: to float32 and from float32 directly,
// other dtypes through float32 (exact for every value bfloat16 holds, and the same rounding
// of a float64 or integer as XLA's, which also converts through float32... except for values
// whose float32 rounding lands on a bfloat16 tie: a double rounding XLA avoids).
func convertBF16(r *execution, out, in *Buffer) error {
	switch x := in.flat.(type) {
	case []bf16:
		switch o := out.flat.(type) {
		case []float32:
			widenBF16(r, o, x)
			return nil
		case []bool:
			for i, v := range x {
				o[i] = v&0x7fff != 0
			}
			return nil
		}
		tmp := r.pool.get(dtypes.Float32, len(x)).([]float32)
		defer r.pool.put(dtypes.Float32, tmp)
		widenBF16(r, tmp, x)
		convertFrom(out.flat, tmp)
		return nil
	case []float32:
		narrowBF16(r, out.flat.([]bf16), x)
		return nil
	case []bool:
		o := out.flat.([]bf16)
		for i, v := range x {
			o[i] = 0
			if v {
				o[i] = 0x3f80 // 1
			}
		}
		return nil
	}
	tmp := r.pool.get(dtypes.Float32, flatLen(in.flat)).([]float32)
	defer r.pool.put(dtypes.Float32, tmp)
	switch x := in.flat.(type) {
	case []float64:
		convert(tmp, x)
	case []int32:
		convert(tmp, x)
	case []int64:
		convert(tmp, x)
	case []uint8:
		convert(tmp, x)
	default:
		return fmt.Errorf("ConvertDType from %s to bfloat16", in.shape.DType)
	}
	narrowBF16(r, out.flat.([]bf16), tmp)
	return nil
}

// sbgemmMode says how DotGeneral multiplies bfloat16 operands.
type sbgemmMode int

const (
	sbgemmAuto   sbgemmMode = iota // cblas_sbgemm where blas.SbgemmFast, else widen to float32
	sbgemmNever                    // always widen (tests)
	sbgemmAlways                   // always through blas.Sbgemm, even without bfloat16 instructions (tests)
)

// bf16GEMM is the package's mode (a sbgemmMode); the tests change it.
var bf16GEMM atomic.Int32

func useSbgemm() bool {
	switch sbgemmMode(bf16GEMM.Load()) {
	case sbgemmNever:
		return false
	case sbgemmAlways:
		return true
	}
	return blas.SbgemmFast()
}

// BF16MatMul describes how the backend multiplies bfloat16 operands on this machine, for the
// start of a run: through cblas_sbgemm (fast), or widened to float32 for sgemm, and why.
func BF16MatMul() (sbgemm bool, description string) {
	feat := blas.CPUBF16()
	switch {
	case !blas.Available():
		return false, "OpenBLAS is not loaded: bf16 operands are widened to f32 and multiplied in Go (same numerics)"
	case blas.SbgemmFast():
		return true, fmt.Sprintf("bf16 operands are multiplied by OpenBLAS's cblas_sbgemm (this CPU has %s)", feat)
	case feat != "":
		return false, fmt.Sprintf("this CPU has %s but the loaded OpenBLAS has no cblas_sbgemm (built without BUILD_BFLOAT16): bf16 operands are multiplied by sgemm in f32 (same numerics, f32 speed)", feat)
	}
	return false, "this CPU has no AVX512-BF16/AMX, bf16 operands are multiplied by sgemm in f32 (same numerics, f32 speed)"
}

// Conversions around bfloat16 products. A model's bfloat16 product is
// ConvertDType(DotGeneral(ConvertDType(a, bf16), ConvertDType(b, bf16)), f32): run as built,
// each operand is narrowed to bfloat16 and widened back for the float32 GEMM, and the product
// narrowed and widened again, four passes where rounding in float32 takes two. So Compile
// (fuseBF16Dots) lets a bfloat16 DotGeneral read the float32 source of an operand's conversion
// and round it as it widens it, and, when a conversion to float32 is the product's only reader,
// computes the product in that conversion's place with the rounded float32 values as its
// result. The bits are the same; conversions no step reads any more are not computed.

// bf16Dot is the data of a bfloat16 DotGeneral rewritten by fuseBF16Dots.
type bf16Dot struct {
	plan *dotPlan
	// round[i]: operand i is a float32 tensor to round to bfloat16 (the source of the
	// conversion the product read).
	round [2]bool
}

// planOf returns a DotGeneral node's plan.
func planOf(n *node) *dotPlan {
	if d, ok := n.data.(*bf16Dot); ok {
		return d.plan
	}
	return n.data.(*dotPlan)
}

// fuseBF16Dots returns the program's nodes with the bfloat16 products rewritten (see above);
// needed marks the nodes the outputs depend on.
func fuseBF16Dots(nodes []*node, needed []bool, outputs []*node) []*node {
	var prog []*node
	readers := make([][]*node, len(nodes))
	for _, n := range nodes {
		if needed[n.idx] {
			for _, in := range n.inputs {
				readers[in.idx] = append(readers[in.idx], n)
			}
		}
	}
	isOutput := make([]bool, len(nodes))
	for _, o := range outputs {
		isOutput[o.idx] = true
	}
	for _, n := range nodes {
		if !needed[n.idx] || n.op != backends.OpTypeDotGeneral || n.shape.DType != dtypes.BFloat16 {
			continue
		}
		if prog == nil {
			prog = slices.Clone(nodes)
		}
		d := &bf16Dot{plan: planOf(n)}
		f := *n
		f.inputs = slices.Clone(n.inputs)
		for i, in := range n.inputs {
			if in = nodes[in.idx]; in.op == backends.OpTypeConvertDType && in.inputs[0].shape.DType == dtypes.Float32 {
				f.inputs[i], d.round[i] = in.inputs[0], true
			}
		}
		f.data = d
		prog[n.idx] = &f
		if rs := readers[n.idx]; len(rs) == 1 && !isOutput[n.idx] &&
			rs[0].op == backends.OpTypeConvertDType && rs[0].shape.DType == dtypes.Float32 {
			g := f
			g.idx, g.shape = rs[0].idx, rs[0].shape
			prog[g.idx] = &g
		}
	}
	if prog == nil {
		return nodes
	}
	return prog
}

// execBF16Dot runs a DotGeneral rewritten by fuseBF16Dots: bfloat16 operands widened or float32
// ones rounded, the float32 product, rounded into a bfloat16 result or in place into a float32
// one.
func execBF16Dot(r *execution, n *node, d *bf16Dot, in []*Buffer) *Buffer {
	out := r.newBuffer(n.shape)
	var acc []float32
	if o, ok := out.flat.([]float32); ok {
		acc = o
	} else {
		acc = r.pool.get(dtypes.Float32, n.shape.Size()).([]float32)
		defer r.pool.put(dtypes.Float32, acc)
	}
	p := d.plan
	if useSbgemm() && p.m*p.n*p.k > goGemmMaxFMAs {
		var ops [2][]bf16
		for i, b := range in {
			if d.round[i] {
				x := b.flat.([]float32)
				ops[i] = r.pool.get(dtypes.BFloat16, len(x)).([]bf16)
				defer r.pool.put(dtypes.BFloat16, ops[i])
				narrowBF16(r, ops[i], x)
			} else {
				ops[i] = b.flat.([]bf16)
			}
		}
		dotSbgemm(r, p, ops[0], ops[1], acc)
	} else {
		var ops [2][]float32
		for i, b := range in {
			ops[i] = r.pool.get(dtypes.Float32, b.shape.Size()).([]float32)
			defer r.pool.put(dtypes.Float32, ops[i])
			if d.round[i] {
				roundBF16(r, ops[i], b.flat.([]float32))
			} else {
				widenBF16(r, ops[i], b.flat.([]bf16))
			}
		}
		dotFloat32(r, p, ops[0], ops[1], acc)
	}
	if o, ok := out.flat.([]bf16); ok {
		narrowBF16(r, o, acc)
	} else {
		roundBF16(r, acc, acc)
	}
	return out
}

// dotBFloat16 multiplies bfloat16 operands with float32 accumulation into a float32 scratch,
// then rounds it into out.
func dotBFloat16(r *execution, p *dotPlan, lhs, rhs, out []bf16) {
	acc := r.pool.get(dtypes.Float32, len(out)).([]float32)
	defer r.pool.put(dtypes.Float32, acc)
	if useSbgemm() && p.m*p.n*p.k > goGemmMaxFMAs {
		dotSbgemm(r, p, lhs, rhs, acc)
	} else {
		a := r.pool.get(dtypes.Float32, len(lhs)).([]float32)
		b := r.pool.get(dtypes.Float32, len(rhs)).([]float32)
		widenBF16(r, a, lhs)
		widenBF16(r, b, rhs)
		dotFloat32(r, p, a, b, acc)
		r.pool.put(dtypes.Float32, a)
		r.pool.put(dtypes.Float32, b)
	}
	narrowBF16(r, out, acc)
}

// roundBF16 sets dst to src rounded to bfloat16 values (RoundToBF16), spread over the cores.
func roundBF16(r *execution, dst, src []float32) {
	r.items(len(src), len(src), func(lo, hi int) { RoundToBF16(dst[lo:hi], src[lo:hi]) })
}

// dotSbgemm is dotFloat32 with cblas_sbgemm: operands read in place (transpose flags, strided
// views) or transposed first, in bfloat16.
func dotSbgemm(r *execution, p *dotPlan, lhs, rhs []bf16, out []float32) {
	a, relA := transposed(r, lhs, p.lhsDims, p.lhsPerm)
	defer relA()
	b, relB := transposed(r, rhs, p.rhsDims, p.rhsPerm)
	defer relB()
	m, k, n := p.m, p.k, p.n
	if k == 0 {
		clear(out)
		return
	}
	if m == 0 || n == 0 {
		return
	}
	lda, ldb, aOff, bOff := p.operands()
	ab, bb := bf16Bits(a), bf16Bits(b)
	itemA := func(i int) []uint16 { return ab[itemOffset(aOff, i, m*k):] }
	itemB := func(i int) []uint16 { return bb[itemOffset(bOff, i, k*n):] }
	if r.oneThread || (p.batch > 1 && m*n*k <= sideBySideMaxFMAs) {
		r.items(p.batch, p.batch*m*n*k, func(lo, hi int) {
			for bi := lo; bi < hi; bi++ {
				blas.SbgemmOneThread(p.transA, p.transB, m, n, k, 1, itemA(bi), lda, itemB(bi), ldb, 0, out[bi*m*n:], n)
			}
		})
		return
	}
	for bi := range p.batch {
		blas.Sbgemm(p.transA, p.transB, m, n, k, 1, itemA(bi), lda, itemB(bi), ldb, 0, out[bi*m*n:], n)
	}
}
