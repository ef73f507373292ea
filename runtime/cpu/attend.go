package cpu

import "fmt"

// HasAttend says whether Attend is available: the C kernels are compiled in (cgo, without
// -tags noopenblas). Without them the caller runs its own loops.
const HasAttend = vecCompiledIn

// Attend computes one attention head for the host decoder: scores[j] = scale·(q·k_j) for the
// len(scores) positions j of keys k and values v (rows of len(q) floats), then out =
// softmax(scores)·v. scores is left holding the unnormalised weights e^(score − max). In one
// cgo call per head, vectorised (AVX2 where the CPU has it): Go's scalar loops ran the
// products at about 5 GFLOP/s. The softmax and the weighted sum are bit-identical to scalar
// float32 loops in the same order; the dot products sum eight interleaved partial sums, the
// same at every instruction-set level. It panics when !HasAttend or on short slices.
func Attend(q, k, v []float32, scale float32, scores, out []float32) {
	n, hd := len(scores), len(q)
	if len(k) < n*hd || len(v) < n*hd || len(out) < hd {
		panic(fmt.Sprintf("cpu.Attend: %d positions of %d need %d keys and values (have %d, %d) and %d outputs (have %d)",
			n, hd, n*hd, len(k), len(v), hd, len(out)))
	}
	if n == 0 || hd == 0 {
		clear(out[:hd])
		return
	}
	vecAttendAt(vecLevel, q, k, v, scale, scores, out)
}

// AttendBF16 is Attend for a model computing in bfloat16, whose attention is two bfloat16
// products: q (already scaled, no scale here) and the keys and values are bfloat16 values;
// each score q·k_j is rounded to bfloat16, the softmax's numerators are rounded for the
// weighted sum of the values (their sum, the denominator, is taken before), and that sum is
// rounded before it is divided by the denominator. scores is left holding the rounded
// numerators.
func AttendBF16(q, k, v []float32, scores, out []float32) {
	n, hd := len(scores), len(q)
	if len(k) < n*hd || len(v) < n*hd || len(out) < hd {
		panic(fmt.Sprintf("cpu.AttendBF16: %d positions of %d need %d keys and values (have %d, %d) and %d outputs (have %d)",
			n, hd, n*hd, len(k), len(v), hd, len(out)))
	}
	if n == 0 || hd == 0 {
		clear(out[:hd])
		return
	}
	vecAttendModeAt(vecLevel, q, k, v, 1, scores, out, true)
}
