package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var allOps = []ReduceOp{ReduceSum, ReduceProduct, ReduceMax, ReduceMin}

// randAxes returns a random subset of 0..rank-1 in random order.
func randAxes(rng *rand.Rand, rank int) []int {
	axes := randSubset(rng, rank)
	rng.Shuffle(len(axes), func(i, j int) { axes[i], axes[j] = axes[j], axes[i] })
	return axes
}

func TestReduceFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for trial := range 1500 {
		rank := rng.IntN(5)
		dims := randDims(rng, rank, 6, true)
		if trial%50 == 0 {
			dims = []int{3, 700, 2}[:min(3, rank+1)] // long runs and columns
		}
		axes := randAxes(rng, len(dims))
		op := allOps[trial%4]
		src := make([]float32, product(dims))
		for i := range src {
			if op == ReduceProduct {
				src[i] = float32(0.9 + 0.2*rng.Float64()) // keep products finite
			} else {
				src[i] = float32(rng.NormFloat64())
			}
		}
		want, absSum, dstDims := refReduce(src, dims, axes, op)
		got := make([]float32, product(dstDims))
		Reduce(got, src, dims, axes, op)
		// Rounding bound of float32 accumulation: n·ε·Σ|x| for n reduced elements per output.
		n := float64(len(src)) / float64(max(1, len(got)))
		for i := range got {
			tol := 1e-7 + 1.2e-7*n*absSum[i]
			if op == ReduceProduct {
				tol = 1.2e-7 * n * math.Abs(want[i])
			}
			if op == ReduceMax || op == ReduceMin {
				tol = 0
			}
			if d := math.Abs(float64(got[i]) - want[i]); float64(got[i]) != want[i] && !(d <= tol) {
				t.Fatalf("trial %d: Reduce%s(dims=%v, axes=%v)[%d] = %v, want %v (tolerance %g)", trial, op, dims, axes, i, got[i], want[i], tol)
			}
		}
	}
}

// TestMaxMinRun checks the eight-lane max and min against one chain of Go's max/min: the same
// bits for NaN anywhere, mixed signed zeros, infinities, and lengths around the lane count.
func TestMaxMinRun(t *testing.T) {
	nan, inf, negZero := math.NaN(), math.Inf(1), math.Copysign(0, -1)
	chain := func(op ReduceOp, acc float64, x []float64) float64 {
		for _, v := range x {
			if op == ReduceMax {
				acc = max(acc, v)
			} else {
				acc = min(acc, v)
			}
		}
		return acc
	}
	rng := rand.New(rand.NewPCG(35, 36))
	specials := []float64{nan, inf, -inf, 0, negZero, 1, -1}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 33, 100} {
		for trial := range 200 {
			x := make([]float64, n)
			for i := range x {
				if rng.IntN(4) == 0 {
					x[i] = specials[rng.IntN(len(specials))]
				} else {
					x[i] = float64(rng.IntN(5) - 2) // ties and zeros are common
				}
			}
			acc := specials[trial%len(specials)]
			for _, op := range []ReduceOp{ReduceMax, ReduceMin} {
				got, want := reduceRun(op, acc, x), chain(op, acc, x)
				if math.Float64bits(got) != math.Float64bits(want) && !(got != got && want != want) {
					t.Fatalf("%s(acc=%v, %v) = %v, want %v", op, acc, x, got, want)
				}
				got32 := reduceRun(op, float32(acc), toFloat32(x))
				if float64(got32) != float64(float32(want)) && !(got32 != got32 && want != want) || math.Signbit(float64(got32)) != math.Signbit(want) {
					t.Fatalf("float32 %s(acc=%v, %v) = %v, want %v", op, acc, x, got32, want)
				}
			}
		}
	}
}

func toFloat32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func TestReduceIntegers(t *testing.T) {
	// Integer reductions are exact: sums of small values, max/min over the full range of uint8
	// and int8 (their identities are the type's extremes).
	rng := rand.New(rand.NewPCG(33, 34))
	for trial := range 500 {
		dims := randDims(rng, rng.IntN(5), 5, true)
		axes := randAxes(rng, len(dims))
		op := allOps[trial%4]
		if op == ReduceProduct {
			op = ReduceSum
		}
		s32 := make([]int32, product(dims))
		u8 := make([]uint8, len(s32))
		i8 := make([]int8, len(s32))
		for i := range s32 {
			s32[i] = int32(rng.IntN(2001) - 1000)
			u8[i] = uint8(rng.IntN(256))
			i8[i] = int8(rng.IntN(256))
		}
		checkExact(t, s32, dims, axes, op)
		if op != ReduceSum {
			checkExact(t, u8, dims, axes, op)
			checkExact(t, i8, dims, axes, op)
		}
	}
}

func checkExact[T Number](t *testing.T, src []T, dims, axes []int, op ReduceOp) {
	t.Helper()
	want, _, dstDims := refReduce(src, dims, axes, op)
	got := make([]T, product(dstDims))
	Reduce(got, src, dims, axes, op)
	for i := range got {
		if float64(got[i]) != want[i] {
			t.Fatalf("Reduce%s[%T](dims=%v, axes=%v)[%d] = %v, want %v", op, src[0], dims, axes, i, got[i], want[i])
		}
	}
}

// myFloat is a named type: the kernels must not rely on type switches over concrete types.
type myFloat float64

func TestReduceIdentitiesAndSpecialValues(t *testing.T) {
	inf := math.Inf(1)
	nan := math.NaN()
	tests := []struct {
		name string
		src  []float64
		dims []int
		axes []int
		op   ReduceOp
		want []float64
	}{
		{"empty sum", nil, []int{2, 0}, []int{1}, ReduceSum, []float64{0, 0}},
		{"empty product", nil, []int{2, 0}, []int{1}, ReduceProduct, []float64{1, 1}},
		{"empty max", nil, []int{2, 0}, []int{1}, ReduceMax, []float64{-inf, -inf}},
		{"empty min", nil, []int{0, 3}, []int{0}, ReduceMin, []float64{inf, inf, inf}},
		{"scalar", []float64{5}, nil, nil, ReduceSum, []float64{5}},
		{"no axes", []float64{1, 2, 3}, []int{3}, nil, ReduceMax, []float64{1, 2, 3}},
		{"size-1 axis sum of -0", []float64{math.Copysign(0, -1)}, []int{1}, []int{0}, ReduceSum, []float64{0}},
		{"max NaN", []float64{1, nan, 3, 4, 5, 6}, []int{2, 3}, []int{1}, ReduceMax, []float64{nan, 6}},
		{"min NaN column", []float64{1, nan, 3, 4, 5, 6}, []int{2, 3}, []int{0}, ReduceMin, []float64{1, nan, 3}},
		{"full", []float64{1, 2, 3, 4, 5, 6}, []int{2, 3}, []int{1, 0}, ReduceProduct, []float64{720}},
	}
	for _, tc := range tests {
		got := make([]float64, len(tc.want))
		Reduce(got, tc.src, tc.dims, tc.axes, tc.op)
		for i := range got {
			same := got[i] == tc.want[i] && math.Signbit(got[i]) == math.Signbit(tc.want[i]) ||
				math.IsNaN(got[i]) && math.IsNaN(tc.want[i])
			if !same {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
	// Identities of integer and named types.
	if got := identity[int8](ReduceMax); got != math.MinInt8 {
		t.Errorf("identity[int8](max) = %d", got)
	}
	if got := identity[uint16](ReduceMin); got != math.MaxUint16 {
		t.Errorf("identity[uint16](min) = %d", got)
	}
	if got := identity[int64](ReduceMin); got != math.MaxInt64 {
		t.Errorf("identity[int64](min) = %d", got)
	}
	if got := identity[uint64](ReduceMax); got != 0 {
		t.Errorf("identity[uint64](max) = %d", got)
	}
	if got := identity[myFloat](ReduceMax); !math.IsInf(float64(got), -1) {
		t.Errorf("identity[myFloat](max) = %v", got)
	}
	if got := identity[float32](ReduceMin); !math.IsInf(float64(got), 1) {
		t.Errorf("identity[float32](min) = %v", got)
	}
}

func TestArgMinMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	for trial := range 1000 {
		rank := 1 + rng.IntN(4)
		dims := randDims(rng, rank, 6, true)
		if trial%100 == 0 {
			dims = []int{2, 600, 3}
		}
		axis := rng.IntN(len(dims))
		src := make([]float64, product(dims))
		for i := range src {
			src[i] = float64(rng.IntN(5)) // many ties: the first index must win
			if rng.IntN(40) == 0 {
				src[i] = math.NaN()
			}
		}
		for _, isMin := range []bool{false, true} {
			want := refArgMinMax(src, dims, axis, isMin)
			got := make([]int32, len(want))
			ArgMinMax(got, src, dims, axis, isMin)
			for i := range got {
				if int(got[i]) != want[i] {
					t.Fatalf("trial %d: ArgMinMax(dims=%v, axis=%d, isMin=%v) = %v, want %v", trial, dims, axis, isMin, got, want)
				}
			}
		}
	}
	got := make([]uint8, 3)
	ArgMinMax(got, []int16{2, 0, 7, -3, 4, 2}, []int{2, 3}, 0, false)
	if want := []uint8{0, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("ArgMax([[2,0,7],[-3,4,2]], axis 0) = %v, want %v", got, want)
	}
}

// TestReducePairAxis: a reduction over one axis of two elements that is not innermost (RoPE's
// halves) takes its own one-pass path; it must give op(op(identity, first), second) exactly,
// signed zeros and NaNs included.
func TestReducePairAxis(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 5))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN())}
	for _, dims := range [][]int{{2, 7}, {3, 2, 5}, {4, 2, 33}, {2, 3, 2, 300}} {
		axis := len(dims) - 2
		src := make([]float32, product(dims))
		for i := range src {
			if rng.IntN(8) == 0 {
				src[i] = specials[rng.IntN(len(specials))]
			} else {
				src[i] = float32(rng.NormFloat64())
			}
		}
		inner := dims[len(dims)-1]
		outer := product(dims[:axis])
		for _, op := range allOps {
			for _, w := range append([]int{1}, workerCounts...) {
				got := make([]float32, outer*inner)
				reduce(got, src, dims, []int{axis}, op, w)
				id := identity[float32](op)
				want := make([]float32, outer*inner)
				for o := range outer {
					for k := range inner {
						a, b := src[(o*2)*inner+k], src[(o*2+1)*inner+k]
						switch op {
						case ReduceSum:
							want[o*inner+k] = (id + a) + b
						case ReduceProduct:
							want[o*inner+k] = (id * a) * b
						case ReduceMax:
							want[o*inner+k] = max(max(id, a), b)
						case ReduceMin:
							want[o*inner+k] = min(min(id, a), b)
						}
					}
				}
				// Bits, except NaN payloads (Go leaves them unspecified).
				if !slices.EqualFunc(got, want, func(x, y float32) bool {
					return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
				}) {
					t.Fatalf("Reduce%s(dims=%v, axis %d) with %d workers: %v, want %v", op, dims, axis, w, got, want)
				}
			}
		}
	}
}
