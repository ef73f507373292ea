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
		// Go's max returns NaN if either operand is NaN, as XLA's reduce-max does.
		for _, v := range x {
			acc = max(acc, v)
		}
		return acc
	case ReduceMin:
		for _, v := range x {
			acc = min(acc, v)
		}
		return acc
	}
	panic("kernels: unknown " + op.String())
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
