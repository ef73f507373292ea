package kernels

import "math"

// isFloat reports whether T is a floating-point type: only there does 1/2 not truncate to 0.
func isFloat[T Number]() bool {
	half := T(1)
	half /= 2
	return half != 0
}

// lowest returns -Inf for floating-point types and the minimum value of integer types.
func lowest[T Number]() T {
	if isFloat[T]() {
		return T(math.Inf(-1))
	}
	// Doubling 1 overflows to the minimum of a signed type (1<<(bits-1) wraps negative) and to
	// 0 for an unsigned one: the minimum either way, with no type switch (T may be a named type).
	x := T(1)
	for x > 0 {
		x *= 2
	}
	return x
}

// highest returns +Inf for floating-point types and the maximum value of integer types.
func highest[T Number]() T {
	if isFloat[T]() {
		return T(math.Inf(1))
	}
	// The minimum minus one wraps around to the maximum, signed or not.
	return lowest[T]() - 1
}

// identity is the value op reduces an empty set to.
func identity[T Number](op ReduceOp) T {
	switch op {
	case ReduceSum:
		return 0
	case ReduceProduct:
		return 1
	case ReduceMax:
		return lowest[T]()
	case ReduceMin:
		return highest[T]()
	}
	panic("kernels: unknown " + op.String())
}

// reduceRun folds the contiguous run x into acc with op. Sums and products use eight
// independent accumulators so consecutive adds do not wait on each other; the grouping is
// fixed by len(x) alone, so the result is deterministic.
func reduceRun[T Number](op ReduceOp, acc T, x []T) T {
	switch op {
	case ReduceSum:
		var s0, s1, s2, s3, s4, s5, s6, s7 T
		for len(x) >= 8 {
			s0 += x[0]
			s1 += x[1]
			s2 += x[2]
			s3 += x[3]
			s4 += x[4]
			s5 += x[5]
			s6 += x[6]
			s7 += x[7]
			x = x[8:]
		}
		for _, v := range x {
			s0 += v
		}
		return acc + (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))
	case ReduceProduct:
		p0, p1, p2, p3 := T(1), T(1), T(1), T(1)
		for len(x) >= 4 {
			p0 *= x[0]
			p1 *= x[1]
			p2 *= x[2]
			p3 *= x[3]
			x = x[4:]
		}
		for _, v := range x {
			p0 *= v
		}
		return acc * ((p0 * p1) * (p2 * p3))
	case ReduceMax:
		return maxRun(acc, x)
	case ReduceMin:
		return minRun(acc, x)
	}
	panic("kernels: unknown " + op.String())
}

// maxRun folds x into acc with Go's max, which returns NaN if either operand is NaN (as XLA's
// reduce-max does) and +0 for max(-0, +0). That makes it associative and commutative, so eight
// independent lanes give the same bits as one chain, without each comparison waiting on the
// previous one (a single chain ran at a tenth of the sum's speed).
func maxRun[T Number](acc T, x []T) T {
	m0, m1, m2, m3, m4, m5, m6, m7 := acc, acc, acc, acc, acc, acc, acc, acc
	for len(x) >= 8 {
		m0 = max(m0, x[0])
		m1 = max(m1, x[1])
		m2 = max(m2, x[2])
		m3 = max(m3, x[3])
		m4 = max(m4, x[4])
		m5 = max(m5, x[5])
		m6 = max(m6, x[6])
		m7 = max(m7, x[7])
		x = x[8:]
	}
	for _, v := range x {
		m0 = max(m0, v)
	}
	return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
}

// minRun is maxRun for min (NaN wins, min(-0, +0) is -0).
func minRun[T Number](acc T, x []T) T {
	m0, m1, m2, m3, m4, m5, m6, m7 := acc, acc, acc, acc, acc, acc, acc, acc
	for len(x) >= 8 {
		m0 = min(m0, x[0])
		m1 = min(m1, x[1])
		m2 = min(m2, x[2])
		m3 = min(m3, x[3])
		m4 = min(m4, x[4])
		m5 = min(m5, x[5])
		m6 = min(m6, x[6])
		m7 = min(m7, x[7])
		x = x[8:]
	}
	for _, v := range x {
		m0 = min(m0, v)
	}
	return min(min(min(m0, m1), min(m2, m3)), min(min(m4, m5), min(m6, m7)))
}

// combineRun sets dst[i] = op(dst[i], src[i]) for every i.
func combineRun[T Number](op ReduceOp, dst, src []T) {
	src = src[:len(dst)]
	switch op {
	case ReduceSum:
		for i, v := range src {
			dst[i] += v
		}
	case ReduceProduct:
		for i, v := range src {
			dst[i] *= v
		}
	case ReduceMax:
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	case ReduceMin:
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	default:
		panic("kernels: unknown " + op.String())
	}
}

// combineFrom2 sets dst[i] = op(op(id, a[i]), b[i]): filling dst with id and combining a and b
// into it, in one pass, with the same rounding.
func combineFrom2[T Number](op ReduceOp, dst []T, id T, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	switch op {
	case ReduceSum:
		for i := range dst {
			dst[i] = (id + a[i]) + b[i]
		}
	case ReduceProduct:
		for i := range dst {
			dst[i] = (id * a[i]) * b[i]
		}
	case ReduceMax:
		for i := range dst {
			dst[i] = max(max(id, a[i]), b[i])
		}
	case ReduceMin:
		for i := range dst {
			dst[i] = min(min(id, a[i]), b[i])
		}
	default:
		panic("kernels: unknown " + op.String())
	}
}

// combine4 sets dst[i] = op(op(op(op(dst[i], a[i]), b[i]), c[i]), d[i]): four combineRun calls
// in one pass, with the same rounding.
func combine4[T Number](op ReduceOp, dst, a, b, c, d []T) {
	n := len(dst)
	a, b, c, d = a[:n], b[:n], c[:n], d[:n]
	switch op {
	case ReduceSum:
		for i := range dst {
			dst[i] = dst[i] + a[i] + b[i] + c[i] + d[i]
		}
	case ReduceProduct:
		for i := range dst {
			dst[i] = dst[i] * a[i] * b[i] * c[i] * d[i]
		}
	case ReduceMax:
		for i := range dst {
			dst[i] = max(max(max(max(dst[i], a[i]), b[i]), c[i]), d[i])
		}
	case ReduceMin:
		for i := range dst {
			dst[i] = min(min(min(min(dst[i], a[i]), b[i]), c[i]), d[i])
		}
	default:
		panic("kernels: unknown " + op.String())
	}
}
