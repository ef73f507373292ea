//go:build cgo && !noopenblas

package cpu

/*
#cgo CFLAGS: -O3 -std=c11
#cgo LDFLAGS: -lm
#include "vec.h"
*/
import "C"

import "unsafe"

// vecCompiledIn says whether the C kernels are in this build.
const vecCompiledIn = true

// vecLevel is the instruction-set level the kernels use on this CPU (vec.h), fixed at start.
var vecLevel = int(C.stx_vec_level())

// vecLevels lists the levels this CPU can run, for the tests.
func vecLevels() []int {
	levels := []int{C.STX_VEC_GENERIC}
	if vecLevel >= C.STX_VEC_AVX2 {
		levels = append(levels, C.STX_VEC_AVX2)
	}
	if vecLevel >= C.STX_VEC_AVX512 {
		levels = append(levels, C.STX_VEC_AVX512)
	}
	return levels
}

// vecLevelName names a level, for test and benchmark names.
func vecLevelName(level int) string {
	switch level {
	case C.STX_VEC_AVX2:
		return "avx2"
	case C.STX_VEC_AVX512:
		return "avx512"
	}
	return "generic"
}

func floatPtr(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

// vecUnaryAt runs unary kernel code at the given level; out and x have the same length.
func vecUnaryAt(level, code int, out, x []float32) {
	if len(out) == 0 {
		return
	}
	C.stx_vec_unary(C.int(level), C.int(code), floatPtr(out), floatPtr(x), C.long(len(out)))
}

// vecBinaryAt runs binary kernel code at the given level and layout; s is the scalar operand
// of the VS and SV layouts, whose y or x is then unused (nil).
func vecBinaryAt(level, code, layout int, out, x, y []float32, s float32) {
	if len(out) == 0 {
		return
	}
	C.stx_vec_binary(C.int(level), C.int(code), C.int(layout), floatPtr(out), floatPtr(x), floatPtr(y), C.float(s), C.long(len(out)))
}

// vecMaxNest is the most outer axes vecBinaryNestAt takes.
const vecMaxNest = C.STX_VEC_MAX_NEST

// vecBinaryNestAt runs binary kernel code over rows [lo, hi) of a broadcast loop nest (see
// stx_vec_binary_nest): dims are the outer axes, xs and ys the operands' strides along them,
// inner the length of each row; out holds the whole nest's output.
func vecBinaryNestAt(level, code, layout int, out, x, y []float32, inner int, dims, xs, ys []int64, lo, hi int) {
	if hi <= lo || inner == 0 {
		return
	}
	C.stx_vec_binary_nest(C.int(level), C.int(code), C.int(layout), floatPtr(out), floatPtr(x), floatPtr(y), C.long(inner),
		C.int(len(dims)), longPtr(dims), longPtr(xs), longPtr(ys), C.long(lo), C.long(hi))
}

func longPtr(s []int64) *C.long {
	if len(s) == 0 {
		return nil
	}
	return (*C.long)(unsafe.Pointer(unsafe.SliceData(s)))
}

// vecMaxRowsAt sets out[r] to the max (min when isMin) of row r of x, rows of n elements.
func vecMaxRowsAt(level int, isMin bool, out, x []float32, n int) {
	if len(out) == 0 {
		return
	}
	_ = x[len(out)*n-1]
	m := C.int(0)
	if isMin {
		m = 1
	}
	C.stx_vec_max_rows(C.int(level), m, floatPtr(out), floatPtr(x), C.long(len(out)), C.long(n))
}

// vecAttendAt runs the attention kernel at the given level (see Attend; lengths checked there).
func vecAttendAt(level int, q, k, v []float32, scale float32, scores, out []float32) {
	C.stx_vec_attend(C.int(level), floatPtr(q), floatPtr(k), floatPtr(v), C.long(len(scores)), C.long(len(q)),
		C.float(scale), floatPtr(scores), floatPtr(out))
}
