package cpu

import (
	"math"

	"github.com/gomlx/gomlx/backends"
)

// expf32 is e^x in float32 arithmetic: a Cody-Waite reduction x = n·ln2 + r with |r| ≤ ln2/2,
// a degree-6 polynomial for e^r (Cephes' expf coefficients) and 2^n put in the exponent bits.
// It is within 2 ulp of the correctly rounded result on |x| ≤ 87 and 4-5× faster than
// float32(math.Exp(float64(x))), which dominated softmax and SiLU. Outside that range (overflow,
// subnormal results, +Inf, NaN) it defers to math.Exp; below -104 the result is 0.
func expf32(x float32) float32 {
	if !(x >= -87 && x <= 87) {
		if x < -104 {
			return 0 // below half the smallest subnormal; the common case of masked logits
		}
		return float32(math.Exp(float64(x)))
	}
	const (
		log2e = 1.44269504088896341
		ln2Hi = 0.693359375 // ln2 split so n·ln2Hi is exact for |n| ≤ 127
		ln2Lo = -2.12194440e-4
		// Adding 1.5·2^23 rounds to an integer in the low mantissa bits: a branch-free
		// round-to-nearest (a floor's sign test mispredicts on mixed-sign inputs).
		shifter = 12582912
	)
	k := x*log2e + shifter
	n := int32(math.Float32bits(k)) - 0x4B400000
	fn := k - shifter
	r := x - fn*ln2Hi - fn*ln2Lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// Exp32 is expf32 for other packages: the host decoder of package runtime uses the same
// exponential as the graphs it must agree with.
func Exp32(x float32) float32 { return expf32(x) }

// unaryFloat32Fast runs the float32 ops that have a faster kernel than the generic one; it
// reports whether op was one of them.
func unaryFloat32Fast(op backends.OpType, out, x []float32) bool {
	switch op {
	case backends.OpTypeExp:
		x = x[:len(out)]
		for i := range out {
			out[i] = expf32(x[i])
		}
	case backends.OpTypeLogistic:
		x = x[:len(out)]
		for i := range out {
			// Branch-free (a sign test mispredicts on mixed-sign activations): for very negative
			// x, e^-x overflows to +Inf and 1/(1+Inf) is the correct 0.
			out[i] = 1 / (1 + expf32(-x[i]))
		}
	default:
		return false
	}
	return true
}
