package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"stx.dev/stx/runtime/cpu/blas"
	"stx.dev/stx/runtime/cpu/kernels"
)

// dotPlan is a DotGeneral normalised to batch × [M,K]·[K,N]: each operand is either used as
// stored (possibly through Sgemm's transpose flag) or transposed first into that layout.
type dotPlan struct {
	batch, m, k, n int
	// lhsPerm / rhsPerm, when not nil, transpose the operand into [batch..., M..., K...] /
	// [batch..., K..., N...] before the multiply.
	lhsPerm, rhsPerm []int
	// transA: the lhs is stored [batch, K, M]; transB: the rhs is stored [batch, N, K].
	transA, transB   bool
	lhsDims, rhsDims []int
	// lhsView / rhsView, when not nil, read a float32 operand in place although its batch
	// axes are not its leading ones (attention's [B,T,heads,hd] keys and values, batched over
	// B and heads): each item is then a strided matrix. Without them such an operand would be
	// transposed first, a full copy, for a product that reads it once.
	lhsView, rhsView *stridedView
}

// stridedView locates each batch item of an operand read in place: item i's matrix starts at
// offsets[i] and its rows are ld elements apart (its columns are contiguous).
type stridedView struct {
	offsets []int
	ld      int
}

// operandLayout says how a product reads an operand of the given dimensions whose items it
// wants as [outer, inner] matrices (the lhs as [M,K], the rhs as [K,N]): as stored, or as
// stored transposed (trans, Sgemm's flag); for float32 (OpenBLAS takes any row stride) through
// a strided view of each item; else transposed first into [batch, outer, inner] (perm).
func operandLayout(dims, batch, outer, inner []int, f32 bool) (trans bool, view *stridedView, perm []int) {
	switch {
	case isIdentity(concatInts(batch, outer, inner)):
		return false, nil, nil
	case isIdentity(concatInts(batch, inner, outer)):
		return true, nil, nil
	}
	if f32 {
		if v := viewInPlace(dims, batch, outer, inner); v != nil {
			return false, v, nil
		}
		if v := viewInPlace(dims, batch, inner, outer); v != nil {
			return true, v, nil
		}
	}
	return false, nil, concatInts(batch, outer, inner)
}

// viewInPlace returns the view under which an operand of the given dimensions is batch ×
// [outer, inner] without a copy, or nil. That needs the inner axes to be the trailing ones (unit
// stride) and the outer axes to be consecutive (one row stride); the batch axes may lie
// anywhere else, in any order: items are enumerated in the order of batch, as the output's.
func viewInPlace(dims, batch, outer, inner []int) *stridedView {
	r := len(dims)
	for i, a := range inner {
		if a != r-len(inner)+i {
			return nil
		}
	}
	for i := 1; i < len(outer); i++ {
		if outer[i] != outer[i-1]+1 {
			return nil
		}
	}
	strides := make([]int, r)
	st := 1
	for a := r - 1; a >= 0; a-- {
		strides[a] = st
		st *= dims[a]
	}
	v := &stridedView{ld: product(dims, inner)}
	if len(outer) > 0 {
		v.ld = strides[outer[len(outer)-1]]
	}
	// Offsets of the batch items, the last batch axis varying fastest.
	v.offsets = []int{0}
	for _, a := range batch {
		next := make([]int, 0, len(v.offsets)*dims[a])
		for _, o := range v.offsets {
			for j := range dims[a] {
				next = append(next, o+j*strides[a])
			}
		}
		v.offsets = next
	}
	return v
}

func isIdentity(perm []int) bool {
	for i, p := range perm {
		if p != i {
			return false
		}
	}
	return true
}

// freeAxes lists the axes of a rank-r operand that are neither batch nor contracting.
func freeAxes(rank int, batch, contracting []int) []int {
	var free []int
	for a := range rank {
		if !slices.Contains(batch, a) && !slices.Contains(contracting, a) {
			free = append(free, a)
		}
	}
	return free
}

func concatInts(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func product(dims []int, axes []int) int {
	p := 1
	for _, a := range axes {
		p *= dims[a]
	}
	return p
}

// planDotGeneral validates the axes and returns the plan and the output shape: batch axes, then
// the lhs free axes, then the rhs free axes (XLA's order).
func planDotGeneral(lhs shapes.Shape, lhsContracting, lhsBatch []int, rhs shapes.Shape, rhsContracting, rhsBatch []int) (*dotPlan, shapes.Shape, error) {
	if lhs.DType != rhs.DType {
		return nil, shapes.Invalid(), fmt.Errorf("dtypes differ: %s and %s", lhs, rhs)
	}
	if len(lhsContracting) != len(rhsContracting) || len(lhsBatch) != len(rhsBatch) {
		return nil, shapes.Invalid(), fmt.Errorf("lhs has %d contracting / %d batch axes, rhs %d / %d",
			len(lhsContracting), len(lhsBatch), len(rhsContracting), len(rhsBatch))
	}
	var err error
	norm := func(axes []int, rank int) []int {
		if err != nil {
			return nil
		}
		var out []int
		out, err = normalizeAxes("DotGeneral", axes, rank)
		return out
	}
	lc, lb := norm(lhsContracting, lhs.Rank()), norm(lhsBatch, lhs.Rank())
	rc, rb := norm(rhsContracting, rhs.Rank()), norm(rhsBatch, rhs.Rank())
	if err != nil {
		return nil, shapes.Invalid(), err
	}
	seen := func(axes ...[]int) error {
		used := map[int]bool{}
		for _, as := range axes {
			for _, a := range as {
				if used[a] {
					return fmt.Errorf("axis %d used twice", a)
				}
				used[a] = true
			}
		}
		return nil
	}
	if err := seen(lc, lb); err != nil {
		return nil, shapes.Invalid(), fmt.Errorf("lhs: %w", err)
	}
	if err := seen(rc, rb); err != nil {
		return nil, shapes.Invalid(), fmt.Errorf("rhs: %w", err)
	}
	for i := range lc {
		if lhs.Dimensions[lc[i]] != rhs.Dimensions[rc[i]] {
			return nil, shapes.Invalid(), fmt.Errorf("contracting dimensions differ: lhs axis %d (%d) vs rhs axis %d (%d)",
				lc[i], lhs.Dimensions[lc[i]], rc[i], rhs.Dimensions[rc[i]])
		}
	}
	for i := range lb {
		if lhs.Dimensions[lb[i]] != rhs.Dimensions[rb[i]] {
			return nil, shapes.Invalid(), fmt.Errorf("batch dimensions differ: lhs axis %d (%d) vs rhs axis %d (%d)",
				lb[i], lhs.Dimensions[lb[i]], rb[i], rhs.Dimensions[rb[i]])
		}
	}
	lf, rf := freeAxes(lhs.Rank(), lb, lc), freeAxes(rhs.Rank(), rb, rc)
	p := &dotPlan{
		batch:   product(lhs.Dimensions, lb),
		m:       product(lhs.Dimensions, lf),
		k:       product(lhs.Dimensions, lc),
		n:       product(rhs.Dimensions, rf),
		lhsDims: slices.Clone(lhs.Dimensions),
		rhsDims: slices.Clone(rhs.Dimensions),
	}
	// bfloat16 operands are read like float32 ones: dotBFloat16 widens them in their layout, and
	// cblas_sbgemm takes the same strides.
	f32 := lhs.DType == dtypes.Float32 || lhs.DType == dtypes.BFloat16
	p.transA, p.lhsView, p.lhsPerm = operandLayout(lhs.Dimensions, lb, lf, lc, f32)
	p.transB, p.rhsView, p.rhsPerm = operandLayout(rhs.Dimensions, rb, rc, rf, f32)
	var dims []int
	for _, a := range lb {
		dims = append(dims, lhs.Dimensions[a])
	}
	for _, a := range lf {
		dims = append(dims, lhs.Dimensions[a])
	}
	for _, a := range rf {
		dims = append(dims, rhs.Dimensions[a])
	}
	return p, shapes.Make(lhs.DType, dims...), nil
}

// execDotGeneral multiplies batch × [M,K]·[K,N]: OpenBLAS for float32 and bfloat16 (bf16.go),
// Go loops otherwise.
func execDotGeneral(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	if d, ok := n.data.(*bf16Dot); ok {
		return execBF16Dot(r, n, d, in), nil
	}
	p := n.data.(*dotPlan)
	out := r.newBuffer(n.shape)
	switch o := out.flat.(type) {
	case []float32:
		dotFloat32(r, p, in[0].flat.([]float32), in[1].flat.([]float32), o)
	case []bf16:
		dotBFloat16(r, p, in[0].flat.([]bf16), in[1].flat.([]bf16), o)
	case []float64:
		dotGeneric(r, p, in[0].flat.([]float64), in[1].flat.([]float64), o)
	case []int32:
		dotGeneric(r, p, in[0].flat.([]int32), in[1].flat.([]int32), o)
	case []int64:
		dotGeneric(r, p, in[0].flat.([]int64), in[1].flat.([]int64), o)
	case []uint8:
		dotGeneric(r, p, in[0].flat.([]uint8), in[1].flat.([]uint8), o)
	default:
		return nil, fmt.Errorf("DotGeneral: dtype %s not supported", n.shape.DType)
	}
	return out, nil
}

// transposed returns the operand in the plan's layout: as is, or transposed into a pooled
// scratch slice that release must return.
func transposed[T any](r *execution, src []T, dims, perm []int) (data []T, release func()) {
	if perm == nil {
		return src, func() {}
	}
	dt := flatDType(src)
	tmp := r.pool.get(dt, len(src)).([]T)
	kernels.Transpose(tmp, src, dims, perm)
	return tmp, func() { r.pool.put(dt, tmp) }
}

// operands returns the leading dimensions GEMM reads the plan's operands with and, for an
// operand read in place through a strided view, its items' offsets (nil: items consecutive).
func (p *dotPlan) operands() (lda, ldb int, aOff, bOff []int) {
	lda, ldb = p.k, p.n
	if p.transA {
		lda = p.m
	}
	if p.transB {
		ldb = p.k
	}
	if p.lhsView != nil {
		aOff, lda = p.lhsView.offsets, p.lhsView.ld
	}
	if p.rhsView != nil {
		bOff, ldb = p.rhsView.offsets, p.rhsView.ld
	}
	return lda, ldb, aOff, bOff
}

func dotFloat32(r *execution, p *dotPlan, lhs, rhs, out []float32) {
	a, relA := transposed(r, lhs, p.lhsDims, p.lhsPerm)
	defer relA()
	b, relB := transposed(r, rhs, p.rhsDims, p.rhsPerm)
	defer relB()
	m, k, n := p.m, p.k, p.n
	if k == 0 {
		clear(out) // an empty contraction sums nothing
		return
	}
	if m == 0 || n == 0 {
		return
	}
	lda, ldb, aOff, bOff := p.operands()
	sgemmBatch(r.oneThread, p.transA, p.transB, p.batch, m, n, k, a, lda, aOff, b, ldb, bOff, out)
}

// itemOffset is where batch item bi starts: offsets[bi], or bi·size when items are consecutive
// (offsets nil).
func itemOffset(offsets []int, bi, size int) int {
	if offsets != nil {
		return offsets[bi]
	}
	return bi * size
}

const (
	// goGemmMaxFMAs: products up to this size are computed by gemmGo.
	goGemmMaxFMAs = 1 << 11
	// sideBySideMaxFMAs: a batch of products up to this size runs one product per core at a
	// time, each on one thread; larger ones run one after the other, each on all the cores. A
	// product spread over the cores pays a hand-off each time (OpenBLAS waking its pool), which
	// the attention's per-head products (2^22 multiply-adds in the bench model) do not repay.
	sideBySideMaxFMAs = 1 << 25
)

// gemmGo computes c = a·op(b) for a row-major m×k a (row stride lda) in plain Go: dot
// products of contiguous rows when b is stored transposed ([n,k]), row updates otherwise.
func gemmGo(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32) {
	for i := range m {
		ar := a[i*lda : i*lda+k]
		cr := c[i*n : (i+1)*n]
		if transB {
			for j := range cr {
				br := b[j*ldb : j*ldb+k]
				var s0, s1, s2, s3 float32
				p := 0
				for ; p+4 <= k; p += 4 {
					s0 += ar[p] * br[p]
					s1 += ar[p+1] * br[p+1]
					s2 += ar[p+2] * br[p+2]
					s3 += ar[p+3] * br[p+3]
				}
				for ; p < k; p++ {
					s0 += ar[p] * br[p]
				}
				cr[j] = (s0 + s1) + (s2 + s3)
			}
			continue
		}
		clear(cr)
		for p, av := range ar {
			br := b[p*ldb : p*ldb+n]
			for j := range cr {
				cr[j] += av * br[j]
			}
		}
	}
}

// gemmPath is how sgemmBatch runs a batch of products.
type gemmPath int

const (
	gemmInGo       gemmPath = iota // tiny products, in Go
	gemmSideBySide                 // batch items spread over the cores, each on one thread
	gemmEach                       // one blas.Sgemm per item, each spread over the cores
)

// chooseGemmPath picks sgemmBatch's path for batch products of [m,k]·[k,n]. Tiny products run
// in Go (a cgo call and OpenBLAS's packing cost more than the arithmetic); batches of products
// up to sideBySideMaxFMAs are spread over the cores one item per task, each on one thread (the
// attention's per-head products; the decode step's: 32 heads×rows of [1,256]·[256,64]);
// larger products go to blas.Sgemm one at a time, which spreads each over the cores.
func chooseGemmPath(transA bool, batch, m, n, k int) gemmPath {
	perItem := m * n * k
	switch {
	case perItem <= goGemmMaxFMAs && !transA:
		return gemmInGo
	case batch > 1 && perItem <= sideBySideMaxFMAs:
		return gemmSideBySide
	}
	return gemmEach
}

// sgemmBatch computes out[b] = op(a[b])·op(b[b]) for every batch item (row-major, ldc = n), on
// the path chooseGemmPath picks. Item bi of a starts at aOff[bi] (nil: bi·m·k), of b at bOff[bi]
// (nil: bi·k·n). With oneThread, everything runs on the calling goroutine and
// OpenBLAS's calls on one thread: the caller runs another product beside it (executable.go).
func sgemmBatch(oneThread, transA, transB bool, batch, m, n, k int, a []float32, lda int, aOff []int, b []float32, ldb int, bOff []int, out []float32) {
	perItem := m * n * k
	itemA := func(i int) []float32 { return a[itemOffset(aOff, i, m*k):] }
	itemB := func(i int) []float32 { return b[itemOffset(bOff, i, k*n):] }
	items := parallelFor
	sgemm := blas.Sgemm
	if oneThread {
		items = func(n, _ int, fn func(lo, hi int)) { fn(0, n) }
		sgemm = blas.SgemmOneThread
	}
	switch chooseGemmPath(transA, batch, m, n, k) {
	case gemmInGo:
		items(batch, batch*perItem, func(lo, hi int) {
			for bi := lo; bi < hi; bi++ {
				gemmGo(transB, m, n, k, itemA(bi), lda, itemB(bi), ldb, out[bi*m*n:(bi+1)*m*n])
			}
		})
	case gemmSideBySide:
		items(batch, batch*perItem, func(lo, hi int) {
			for bi := lo; bi < hi; bi++ {
				blas.SgemmOneThread(transA, transB, m, n, k, 1, itemA(bi), lda, itemB(bi), ldb, 0, out[bi*m*n:], n)
			}
		})
	default:
		for bi := range batch {
			sgemm(transA, transB, m, n, k, 1, itemA(bi), lda, itemB(bi), ldb, 0, out[bi*m*n:], n)
		}
	}
}

// pooledFLOPs returns the FLOPs of a float32 DotGeneral whose every product goes to OpenBLAS's
// thread pool, and false for any other node: such products are what the executable runs two at
// a time, side by side (pairProducts). Batches that sgemmBatch already runs side by side are
// not among them. A product summed into an accumulator (dotacc.go) is one too.
func pooledFLOPs(n *node) (int, bool) {
	var p *dotPlan
	if a, ok := n.data.(*dotAcc); ok {
		p = a.plan
	} else if n.op == backends.OpTypeDotGeneral && n.shape.DType == dtypes.Float32 {
		p = planOf(n) // a float32 product, or a bfloat16 one with a float32 result (bf16.go)
	} else {
		return 0, false
	}
	if chooseGemmPath(p.transA, p.batch, p.m, p.n, p.k) != gemmEach || !blas.UsesPool(p.m, p.n, p.k) {
		return 0, false
	}
	return 2 * p.batch * p.m * p.n * p.k, true
}

type dotNumber interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

// dotGeneric is the plain Go product for dtypes OpenBLAS does not cover: rows of the output
// accumulate axpy-style over K so the inner loop is unit-stride when B is not transposed.
func dotGeneric[T dotNumber](r *execution, p *dotPlan, lhs, rhs, out []T) {
	a, relA := transposed(r, lhs, p.lhsDims, p.lhsPerm)
	defer relA()
	b, relB := transposed(r, rhs, p.rhsDims, p.rhsPerm)
	defer relB()
	m, k, n := p.m, p.k, p.n
	for bi := range p.batch {
		ab, bb, ob := a[bi*m*k:(bi+1)*m*k], b[bi*k*n:(bi+1)*k*n], out[bi*m*n:(bi+1)*m*n]
		for i := range m {
			row := ob[i*n : (i+1)*n]
			clear(row)
			for q := range k {
				var av T
				if p.transA {
					av = ab[q*m+i]
				} else {
					av = ab[i*k+q]
				}
				if p.transB {
					for j := range row {
						row[j] += av * bb[j*k+q]
					}
				} else {
					br := bb[q*n : (q+1)*n]
					for j := range row {
						row[j] += av * br[j]
					}
				}
			}
		}
	}
}
