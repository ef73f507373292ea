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
	vecAttendModeAt(level, q, k, v, scale, scores, out, false)
}

// vecAttendModeAt is vecAttendAt, with bf16 the kernel of AttendBF16.
func vecAttendModeAt(level int, q, k, v []float32, scale float32, scores, out []float32, bf16 bool) {
	b := C.int(0)
	if bf16 {
		b = 1
	}
	C.stx_vec_attend(C.int(level), floatPtr(q), floatPtr(k), floatPtr(v), C.long(len(scores)), C.long(len(q)),
		C.float(scale), floatPtr(scores), floatPtr(out), b)
}

// vecMinBF16 is the shortest slice the C conversions take: below it a cgo call costs more.
const vecMinBF16 = 256

// vecWidenBF16 widens src into dst in C (bf16.c) when it is long enough; it reports whether it
// did.
func vecWidenBF16(dst []float32, src []bf16) bool {
	if len(src) < vecMinBF16 {
		return false
	}
	C.stx_bf16_widen(C.int(vecLevel), floatPtr(dst[:len(src)]), (*C.ushort)(unsafe.Pointer(unsafe.SliceData(src))), C.long(len(src)))
	return true
}

// vecNarrowBF16 rounds src into dst in C when it is long enough; it reports whether it did.
func vecNarrowBF16(dst []bf16, src []float32) bool {
	if len(src) < vecMinBF16 {
		return false
	}
	dst = dst[:len(src)]
	C.stx_bf16_narrow(C.int(vecLevel), (*C.ushort)(unsafe.Pointer(unsafe.SliceData(dst))), floatPtr(src), C.long(len(src)))
	return true
}

// vecRoundBF16 rounds src into dst (float32 values) in C when it is long enough; it reports
// whether it did.
func vecRoundBF16(dst, src []float32) bool {
	if len(src) < vecMinBF16 {
		return false
	}
	C.stx_bf16_round(C.int(vecLevel), floatPtr(dst[:len(src)]), floatPtr(src), C.long(len(src)))
	return true
}

// bf16At runs the C conversions at a given level (tests): op 0 narrow, 1 widen, 2 round.
func bf16At(level, op int, f32 []float32, b16 []bf16, rounded []float32) {
	n := len(f32)
	if n == 0 {
		return
	}
	switch op {
	case 0:
		C.stx_bf16_narrow(C.int(level), (*C.ushort)(unsafe.Pointer(unsafe.SliceData(b16))), floatPtr(f32), C.long(n))
	case 1:
		C.stx_bf16_widen(C.int(level), floatPtr(f32), (*C.ushort)(unsafe.Pointer(unsafe.SliceData(b16))), C.long(n))
	default:
		C.stx_bf16_round(C.int(level), floatPtr(rounded), floatPtr(f32), C.long(n))
	}
}
