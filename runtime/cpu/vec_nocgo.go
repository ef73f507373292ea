//go:build !cgo || noopenblas

package cpu

// vecCompiledIn says whether the C kernels are in this build: not without cgo or with
// -tags noopenblas, where the Go loops run.
const vecCompiledIn = false

// vecLevel is the instruction-set level of the kernels: none here.
const vecLevel = 0

func vecLevels() []int { return nil }

func vecLevelName(int) string { return "none" }

func vecUnaryAt(level, code int, out, x []float32) {
	panic("cpu: the C kernels are not compiled in")
}

func vecBinaryAt(level, code, layout int, out, x, y []float32, s float32) {
	panic("cpu: the C kernels are not compiled in")
}

const vecMaxNest = 8

func vecBinaryNestAt(level, code, layout int, out, x, y []float32, inner int, dims, xs, ys []int64, lo, hi int) {
	panic("cpu: the C kernels are not compiled in")
}

func vecMaxRowsAt(level int, isMin bool, out, x []float32, n int) {
	panic("cpu: the C kernels are not compiled in")
}

func vecAttendAt(level int, q, k, v []float32, scale float32, scores, out []float32) {
	panic("cpu: the C kernels are not compiled in")
}

func vecAttendModeAt(level int, q, k, v []float32, scale float32, scores, out []float32, bf16 bool) {
	panic("cpu: the C kernels are not compiled in")
}

func vecWidenBF16(dst []float32, src []bf16) bool { return false }

func vecNarrowBF16(dst []bf16, src []float32) bool { return false }

func vecRoundBF16(dst, src []float32) bool { return false }

func bf16At(level, op int, f32 []float32, b16 []bf16, rounded []float32) {
	panic("cpu: the C kernels are not compiled in")
}
