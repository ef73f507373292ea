package cpu

import "github.com/gomlx/gomlx/backends"

// Vectorised float32 kernels. Go has no SIMD and this backend's elementwise loops cost about
// as much as its matrix products, so the hot float32 ops also exist as C kernels (vec.c, built
// with cgo, compiled for baseline x86-64, AVX2 and AVX-512 and picked at run time). They give
// the same results as the Go loops they replace, bit for bit (NaN payloads aside, which Go
// leaves unspecified): IEEE operations are exact; exp and the logistic function use expf32's
// reduction and polynomial in the same order, without fused multiply-adds; the logarithm is
// evaluated in double and rounded once, as float32(math.Log(float64(x))) is. Builds without
// cgo or with -tags noopenblas (vec_nocgo.go) keep the Go loops.

// vecMinLen is the length below which the Go loops run: a cgo call costs 50-100 ns, more
// than a short loop.
const vecMinLen = 256

// Op codes shared with vec.h.
const (
	vecExp = iota
	vecLogistic
	vecNeg
	vecAbs
	vecSqrt
	vecRsqrt
	vecLog
)

const (
	vecAdd = iota
	vecSub
	vecMul
	vecDiv
	vecMax
	vecMin
)

// Operand layouts shared with vec.h: both vectors, right scalar, left scalar.
const (
	vecVV = iota
	vecVS
	vecSV
)

// vecUnaryCode maps a unary op to its C kernel, if it has one.
func vecUnaryCode(op backends.OpType) (int, bool) {
	switch op {
	case backends.OpTypeExp:
		return vecExp, true
	case backends.OpTypeLogistic:
		return vecLogistic, true
	case backends.OpTypeNeg:
		return vecNeg, true
	case backends.OpTypeAbs:
		return vecAbs, true
	case backends.OpTypeSqrt:
		return vecSqrt, true
	case backends.OpTypeRsqrt:
		return vecRsqrt, true
	case backends.OpTypeLog:
		return vecLog, true
	}
	return 0, false
}

// vecBinaryCode maps a binary op to its C kernel, if it has one.
func vecBinaryCode(op backends.OpType) (int, bool) {
	switch op {
	case backends.OpTypeAdd:
		return vecAdd, true
	case backends.OpTypeSub:
		return vecSub, true
	case backends.OpTypeMul:
		return vecMul, true
	case backends.OpTypeDiv:
		return vecDiv, true
	case backends.OpTypeMax:
		return vecMax, true
	case backends.OpTypeMin:
		return vecMin, true
	}
	return 0, false
}

// vecUnary runs out[i] = op(x[i]) in C when the build has the kernels, op has one and the
// slice is long enough; it reports whether it did.
func vecUnary(op backends.OpType, out, x []float32) bool {
	if !vecCompiledIn || len(out) < vecMinLen {
		return false
	}
	code, ok := vecUnaryCode(op)
	if !ok {
		return false
	}
	vecUnaryAt(vecLevel, code, out, x[:len(out)])
	return true
}

// vecBinVV, vecBinVS and vecBinSV are binVV, binVS and binSV for float32 in C; they report
// whether they ran. Pow by 2 (squares in norms) is a product.
func vecBinVV(op backends.OpType, out, x, y []float32) bool {
	if !vecCompiledIn || len(out) < vecMinLen {
		return false
	}
	code, ok := vecBinaryCode(op)
	if !ok {
		return false
	}
	vecBinaryAt(vecLevel, code, vecVV, out, x[:len(out)], y[:len(out)], 0)
	return true
}

func vecBinVS(op backends.OpType, out, x []float32, y float32) bool {
	if !vecCompiledIn || len(out) < vecMinLen {
		return false
	}
	if op == backends.OpTypePow && y == 2 {
		vecBinaryAt(vecLevel, vecMul, vecVV, out, x[:len(out)], x[:len(out)], 0)
		return true
	}
	code, ok := vecBinaryCode(op)
	if !ok {
		return false
	}
	vecBinaryAt(vecLevel, code, vecVS, out, x[:len(out)], nil, y)
	return true
}

func vecBinSV(op backends.OpType, out []float32, x float32, y []float32) bool {
	if !vecCompiledIn || len(out) < vecMinLen {
		return false
	}
	code, ok := vecBinaryCode(op)
	if !ok {
		return false
	}
	vecBinaryAt(vecLevel, code, vecSV, out, nil, y[:len(out)], x)
	return true
}

// float32Loops returns op's vector-vector, vector-scalar and scalar-vector loops over float32,
// through the C kernels where they apply.
func float32Loops(op backends.OpType) (vv func(o, x, y []float32), vs func(o, x []float32, y float32), sv func(o []float32, x float32, y []float32)) {
	vv = func(o, x, y []float32) {
		if !vecBinVV(op, o, x, y) {
			binVV(op, o, x, y)
		}
	}
	vs = func(o, x []float32, y float32) {
		if !vecBinVS(op, o, x, y) {
			binVS(op, o, x, y)
		}
	}
	sv = func(o []float32, x float32, y []float32) {
		if !vecBinSV(op, o, x, y) {
			binSV(op, o, x, y)
		}
	}
	return vv, vs, sv
}

// binaryFloat32 is binaryNumber for float32, through the C kernels where they apply.
func binaryFloat32(op backends.OpType, p *bcastPlan, out, a, b []float32) {
	if vecBinNest(op, p, out, a, b) {
		return
	}
	vv, vs, sv := float32Loops(op)
	applyBinary(p, out, a, b, vv, vs, sv)
}

// vecBinNest runs a broadcasting plan (a [N,D] op [D] or [N,D] op [N,1] pattern, or a deeper
// one) in C, one call per chunk of rows instead of one per row; it reports whether it did.
func vecBinNest(op backends.OpType, p *bcastPlan, out, a, b []float32) bool {
	if !vecNestApplies(op, p) {
		return false
	}
	parallelFor(p.size/p.innerLen, p.size, func(lo, hi int) { vecBinNestRows(op, p, out, a, b, lo, hi) })
	return true
}

// vecNestApplies reports whether vecBinNestRows can run plan p of op.
func vecNestApplies(op backends.OpType, p *bcastPlan) bool {
	if !vecCompiledIn || p.kind != bcastGeneral || p.size < vecMinLen || len(p.outerDims) > vecMaxNest ||
		p.inner == bcastBothScalar {
		return false
	}
	_, ok := vecBinaryCode(op)
	return ok
}

// vecBinNestRows runs rows [lo, hi) of plan p (vecNestApplies) in C.
func vecBinNestRows(op backends.OpType, p *bcastPlan, out, a, b []float32, lo, hi int) {
	layout := vecVV
	switch p.inner {
	case bcastRhsScalar:
		layout = vecVS
	case bcastLhsScalar:
		layout = vecSV
	}
	code, _ := vecBinaryCode(op)
	vecBinaryNestAt(vecLevel, code, layout, out, a, b, p.innerLen, p.outerDims, p.outerL, p.outerR, lo, hi)
}

// binaryFloat32Rows runs rows [lo, hi) of a bcastGeneral plan of op, as binaryFloat32 would.
func binaryFloat32Rows(op backends.OpType, p *bcastPlan, out, a, b []float32, lo, hi int) {
	if vecNestApplies(op, p) {
		vecBinNestRows(op, p, out, a, b, lo, hi)
		return
	}
	vv, vs, sv := float32Loops(op)
	applyRows(p, out, a, b, vv, vs, sv, lo, hi)
}
