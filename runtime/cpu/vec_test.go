package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/runtime/cpu/kernels"
)

// Lengths around the vector widths (4, 8) and the unrolled tails, then longer ones.
var vecLengths = []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 255, 256, 257, 1000}

func f32bits(b uint32) float32 { return math.Float32frombits(b) }

// vecSpecials are the values every kernel must handle as the Go loops do.
var vecSpecials = []float32{
	0, f32bits(0x80000000), 1, -1, 0.5, -2.75,
	float32(math.Inf(1)), float32(math.Inf(-1)),
	f32bits(0x7fc00000), f32bits(0xffc00000), // quiet NaNs of both signs
	f32bits(0x7fc12345), f32bits(0x7f800001), f32bits(0xff812345), // payloads, signalling NaNs
	f32bits(1), f32bits(0x80000001), f32bits(0x007fffff), 1e-40, -3e-39, // subnormals
	math.MaxFloat32, -math.MaxFloat32, 3e38, 1.17549435e-38, -1.17549435e-38,
	// The edges of expf32's fast range and of its zero cut-off.
	87, -87, 87.00001, -87.00001, 88.72283, 88.7229, 89, -103.9, -104, -104.0001, -150, 1e9, -1e9,
}

// vecInput returns n values for the kernels: mostly finite values of all magnitudes (or in
// [-100, 100] for the exponentials), one in five a special value.
func vecInput(rng *rand.Rand, n int, expRange bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch {
		case rng.IntN(5) == 0:
			x[i] = vecSpecials[rng.IntN(len(vecSpecials))]
		case expRange:
			x[i] = float32(rng.Float64()*200 - 100)
		default:
			v := math.Exp(rng.Float64()*180 - 90)
			if rng.IntN(2) == 0 {
				v = -v
			}
			x[i] = float32(v)
		}
	}
	return x
}

// ulpDiff is the distance between two float32 values in units in the last place (both
// finite or equal).
func ulpDiff(a, b float32) int64 {
	key := func(f float32) int64 {
		u := int64(math.Float32bits(f))
		if u&0x80000000 != 0 {
			return -(u & 0x7fffffff)
		}
		return u
	}
	d := key(a) - key(b)
	if d < 0 {
		d = -d
	}
	return d
}

// sameBits reports whether two floats are identical or both NaN. NaN payloads are not
// compared: Go leaves them unspecified, and its compiler's results depend on operand order
// (Add, Mul) and on how it lowers max and min (OR-ed or AND-ed operand bits).
func sameBits(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// goUnary is the Go loop each unary kernel replaces.
func goUnary(op backends.OpType, out, x []float32) {
	if !unaryFloat32Fast(op, out, x) {
		unaryFloat(op, out, x)
	}
}

// runPadded runs kernel on x placed at offset off of a larger buffer, with guard values after
// the output to catch overruns; it returns the output. inPlace writes over x itself.
func runPadded(t *testing.T, x []float32, off int, inPlace bool, kernel func(out, x []float32)) []float32 {
	t.Helper()
	const guard = 8
	const guardVal = float32(-12345.5)
	src := make([]float32, off+len(x)+guard)
	copy(src[off:], x)
	for i := off + len(x); i < len(src); i++ {
		src[i] = guardVal
	}
	dst := src
	if !inPlace {
		dst = make([]float32, len(src))
		for i := range dst {
			dst[i] = guardVal
		}
	}
	kernel(dst[off:off+len(x)], src[off:off+len(x)])
	for i := off + len(x); i < len(dst); i++ {
		if dst[i] != guardVal {
			t.Fatalf("wrote past the end: element %d of %d", i-off, len(x))
		}
	}
	for i := 0; i < off; i++ {
		if !inPlace && dst[i] != guardVal {
			t.Fatalf("wrote before the start")
		}
	}
	return dst[off : off+len(x)]
}

func TestVecUnaryMatchesGo(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("C kernels not compiled in (no cgo or -tags noopenblas)")
	}
	ops := []backends.OpType{backends.OpTypeExp, backends.OpTypeLogistic, backends.OpTypeNeg,
		backends.OpTypeAbs, backends.OpTypeSqrt, backends.OpTypeRsqrt, backends.OpTypeLog}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, level := range vecLevels() {
		for _, op := range ops {
			code, _ := vecUnaryCode(op)
			expLike := op == backends.OpTypeExp || op == backends.OpTypeLogistic
			t.Run(vecLevelName(level)+"/"+op.String(), func(t *testing.T) {
				checked, slowLanes := 0, 0
				for _, n := range vecLengths {
					for off := range 4 {
						for _, inPlace := range []bool{false, true} {
							x := vecInput(rng, n, expLike)
							if op == backends.OpTypeLog {
								for i := range x {
									if rng.IntN(4) != 0 {
										x[i] = float32(math.Abs(float64(x[i])))
									}
								}
							}
							want := make([]float32, n)
							goUnary(op, want, x)
							got := runPadded(t, x, off, inPlace, func(o, xs []float32) { vecUnaryAt(level, code, o, xs) })
							for i := range want {
								checked++
								if sameBits(got[i], want[i]) {
									continue
								}
								xi := x[i]
								if op == backends.OpTypeLogistic {
									xi = -xi
								}
								// expf32's slow path is Go's math.Exp in Go and glibc's exp in
								// C, and Log is two double-precision logarithms, each rounded
								// to float32: allow a 1-ulp disagreement.
								slow := expLike && !(xi >= -87 && xi <= 87) || op == backends.OpTypeLog
								if slow && !math.IsNaN(float64(want[i])) && ulpDiff(got[i], want[i]) <= 1 {
									slowLanes++
									continue
								}
								t.Fatalf("n=%d off=%d inPlace=%v: %s(%v [%#08x]) = %v [%#08x], Go gives %v [%#08x]",
									n, off, inPlace, op, x[i], math.Float32bits(x[i]), got[i], math.Float32bits(got[i]),
									want[i], math.Float32bits(want[i]))
							}
						}
					}
				}
				if slowLanes > 0 {
					t.Logf("%d of %d results 1 ulp from Go's", slowLanes, checked)
				}
			})
		}
	}
}

// TestVecExpAccuracy checks the exponential kernels against float64 references (not only
// against the Go loops), over a dense sweep of the fast range and beyond.
func TestVecExpAccuracy(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("C kernels not compiled in")
	}
	var x []float32
	for v := float32(-110); v <= 95; v += 0.00731 {
		x = append(x, v)
	}
	for _, level := range vecLevels() {
		for _, op := range []backends.OpType{backends.OpTypeExp, backends.OpTypeLogistic} {
			code, _ := vecUnaryCode(op)
			got := make([]float32, len(x))
			vecUnaryAt(level, code, got, x)
			worst := 0.0
			for i, v := range x {
				var want float64
				if op == backends.OpTypeExp {
					want = math.Exp(float64(v))
				} else {
					want = 1 / (1 + math.Exp(-float64(v)))
				}
				if want > math.MaxFloat32 {
					if !math.IsInf(float64(got[i]), 1) {
						t.Fatalf("%s(%v) = %v, want +Inf", op, v, got[i])
					}
					continue
				}
				if want < 1.1754943508222875e-38 { // subnormal or zero results: absolute check
					// Logistic flushes subnormal results to 0 (as the Go loop does: e^-x
					// overflows to +Inf first); exp rounds them within a step.
					if math.Abs(float64(got[i])-want) > 1.5e-45 && !(op == backends.OpTypeLogistic && got[i] == 0) {
						t.Fatalf("%s(%v) = %g, want %g", op, v, got[i], want)
					}
					continue
				}
				ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
				worst = max(worst, math.Abs(float64(got[i])-want)/ulp)
			}
			// expf32 is within 2 ulp; 1/(1+e) adds at most two roundings.
			limit := 2.0
			if op == backends.OpTypeLogistic {
				limit = 3
			}
			if worst > limit {
				t.Errorf("%s/%s: worst error %.2f ulp, want <= %v", vecLevelName(level), op, worst, limit)
			}
			t.Logf("%s/%s: worst error %.2f ulp over %d points", vecLevelName(level), op, worst, len(x))
		}
	}
}

// TestVecLogAccuracy checks the logarithm against math.Log over every binade of positive
// floats (subnormals included) and a dense sweep around 1, where log is smallest.
func TestVecLogAccuracy(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("C kernels not compiled in")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	var x []float32
	for range 200000 {
		x = append(x, math.Float32frombits(uint32(rng.IntN(0x7f800000-1))+1))
	}
	for v := float32(0.5); v < 2; v += 1.0 / 65536 {
		x = append(x, v)
	}
	for _, level := range vecLevels() {
		got := make([]float32, len(x))
		vecUnaryAt(level, vecLog, got, x)
		worst, differ := 0.0, 0
		for i, v := range x {
			want := math.Log(float64(v))
			if got[i] != float32(want) {
				differ++
			}
			ulp := float64(math.Nextafter32(float32(math.Abs(want)), float32(math.Inf(1))) - float32(math.Abs(want)))
			worst = max(worst, math.Abs(float64(got[i])-want)/ulp)
		}
		if worst > 1 {
			t.Errorf("%s: worst error %.3f ulp, want <= 1", vecLevelName(level), worst)
		}
		t.Logf("%s: worst error %.3f ulp; %d of %d differ from the correctly rounded float32(math.Log)",
			vecLevelName(level), worst, differ, len(x))
	}
}

func TestVecBinaryMatchesGo(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("C kernels not compiled in")
	}
	ops := []backends.OpType{backends.OpTypeAdd, backends.OpTypeSub, backends.OpTypeMul,
		backends.OpTypeDiv, backends.OpTypeMax, backends.OpTypeMin}
	layouts := []struct {
		name string
		code int
	}{{"vv", vecVV}, {"vs", vecVS}, {"sv", vecSV}}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, level := range vecLevels() {
		for _, op := range ops {
			code, _ := vecBinaryCode(op)
			for _, l := range layouts {
				t.Run(vecLevelName(level)+"/"+op.String()+"/"+l.name, func(t *testing.T) {
					for _, n := range vecLengths {
						for off := range 4 {
							x, y := vecInput(rng, n, false), vecInput(rng, n, false)
							// Equal operands and signed zeros exercise Max/Min's tie rules.
							for i := 0; i < n; i += 7 {
								y[i] = x[i]
							}
							// The scalar operand cycles through the special values.
							s := vecSpecials[rng.IntN(len(vecSpecials))]
							want := make([]float32, n)
							var kernel func(o, xs []float32)
							switch l.code {
							case vecVV:
								binVV(op, want, x, y)
								kernel = func(o, xs []float32) { vecBinaryAt(level, code, vecVV, o, xs, y, 0) }
							case vecVS:
								binVS(op, want, x, s)
								kernel = func(o, xs []float32) { vecBinaryAt(level, code, vecVS, o, xs, nil, s) }
							default:
								binSV(op, want, s, x)
								kernel = func(o, ys []float32) { vecBinaryAt(level, code, vecSV, o, nil, ys, s) }
							}
							for _, inPlace := range []bool{false, true} {
								got := runPadded(t, x, off, inPlace, kernel)
								for i := range want {
									if !sameBits(got[i], want[i]) {
										t.Fatalf("n=%d off=%d inPlace=%v, element %d: %v [%#08x] vs Go %v [%#08x] (operands %v, %v, scalar %v)",
											n, off, inPlace, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), x[i], y[i], s)
									}
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestVecThroughExecutor runs graphs whose elementwise ops take the C kernels (long operands,
// broadcasts with a long inner axis) and requires the bits of the Go loops.
func TestVecThroughExecutor(t *testing.T) {
	cpu, _ := testBackends()
	rng := rand.New(rand.NewPCG(7, 8))
	x := vecInput(rng, 4*300, true)
	y := vecInput(rng, 4*300, false)
	row := vecInput(rng, 300, false)
	cases := []struct {
		name string
		fn   any
		in   [][]float32
		want func() []float32
	}{
		{"Exp", graph.Exp, [][]float32{x}, func() []float32 { w := make([]float32, len(x)); goUnary(backends.OpTypeExp, w, x); return w }},
		{"Logistic", graph.Logistic, [][]float32{x}, func() []float32 {
			w := make([]float32, len(x))
			goUnary(backends.OpTypeLogistic, w, x)
			return w
		}},
		{"Mul", graph.Mul, [][]float32{x, y}, func() []float32 { w := make([]float32, len(x)); binVV(backends.OpTypeMul, w, x, y); return w }},
		{"AddRow", func(a, b *graph.Node) *graph.Node {
			return graph.Add(graph.Reshape(a, 4, 300), graph.Reshape(b, 1, 300))
		}, [][]float32{x, row}, func() []float32 {
			w := make([]float32, len(x))
			for r := range 4 {
				binVV(backends.OpTypeAdd, w[r*300:(r+1)*300], x[r*300:(r+1)*300], row)
			}
			return w
		}},
		{"MulScalar", func(a *graph.Node) *graph.Node { return graph.MulScalar(a, 1.5) }, [][]float32{y}, func() []float32 {
			w := make([]float32, len(y))
			binVS(backends.OpTypeMul, w, y, 1.5)
			return w
		}},
		{"ScalarSub", func(a *graph.Node) *graph.Node { return graph.Sub(graph.Scalar(a.Graph(), a.DType(), 2), a) }, [][]float32{y}, func() []float32 {
			w := make([]float32, len(y))
			binSV(backends.OpTypeSub, w, 2, y)
			return w
		}},
		{"Square", func(a *graph.Node) *graph.Node { return graph.Pow(a, graph.Scalar(a.Graph(), a.DType(), 2)) }, [][]float32{y}, func() []float32 {
			w := make([]float32, len(y))
			binVS(backends.OpTypePow, w, y, 2)
			return w
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := make([]any, len(c.in))
			for i, v := range c.in {
				in[i] = tensors.FromValue(v)
			}
			out, err := run(t, cpu, c.fn, in...)
			if err != nil {
				t.Fatal(err)
			}
			got := tensors.MustCopyFlatData[float32](out[0])
			want := c.want()
			if len(got) != len(want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
			for i := range want {
				if !sameBits(got[i], want[i]) && ulpDiff(got[i], want[i]) > 1 {
					t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// Benchmarks: ns per element of the Go loops and the C kernels on 64 Ki elements (one
// goroutine), e.g. go test -run '^$' -bench Vec ./runtime/cpu/.
func BenchmarkVec(b *testing.B) {
	const n = 1 << 16
	rng := rand.New(rand.NewPCG(1, 1))
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(rng.Float64()*20 - 10)
		y[i] = float32(rng.Float64()*20 - 10)
	}
	out := make([]float32, n)
	type kernel struct {
		name string
		goFn func()
		cFn  func(level int)
	}
	unary := func(op backends.OpType) kernel {
		code, _ := vecUnaryCode(op)
		return kernel{op.String(), func() { goUnary(op, out, x) }, func(l int) { vecUnaryAt(l, code, out, x) }}
	}
	// A causal softmax's exponentials: every other row of 256 has a run of masked keys.
	masked := make([]float32, n)
	for i := range masked {
		masked[i] = x[i]/2 - 5
		if (i/256)%2 == 1 && i%256 > (i/512)%256 {
			masked[i] = -1e9
		}
	}
	expCode, _ := vecUnaryCode(backends.OpTypeExp)
	kernels := []kernel{
		unary(backends.OpTypeExp),
		{"ExpMasked", func() { goUnary(backends.OpTypeExp, out, masked) }, func(l int) { vecUnaryAt(l, expCode, out, masked) }}, unary(backends.OpTypeLogistic), unary(backends.OpTypeRsqrt), unary(backends.OpTypeLog),
		{"AddVV", func() { binVV(backends.OpTypeAdd, out, x, y) }, func(l int) { vecBinaryAt(l, vecAdd, vecVV, out, x, y, 0) }},
		{"MulVS", func() { binVS(backends.OpTypeMul, out, x, 1.5) }, func(l int) { vecBinaryAt(l, vecMul, vecVS, out, x, nil, 1.5) }},
		{"MaxVV", func() { binVV(backends.OpTypeMax, out, x, y) }, func(l int) { vecBinaryAt(l, vecMax, vecVV, out, x, y, 0) }},
	}
	report := func(b *testing.B) { b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem") }
	for _, k := range kernels {
		b.Run(k.name+"/go", func(b *testing.B) {
			for b.Loop() {
				k.goFn()
			}
			report(b)
		})
		for _, level := range vecLevels() {
			b.Run(fmt.Sprintf("%s/c-%s", k.name, vecLevelName(level)), func(b *testing.B) {
				for b.Loop() {
					k.cFn(level)
				}
				report(b)
			})
		}
	}
}

// TestVecBinaryNestMatchesGo runs broadcast plans through the C nest kernel at every level
// and through applyBinary's Go loops, and requires the same bits, for whole nests and for
// row ranges starting mid-nest (as parallelFor's chunks do).
func TestVecBinaryNestMatchesGo(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("C kernels not compiled in")
	}
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	plans := []struct{ lhs, rhs, out shapes.Shape }{
		{f32(9, 37), f32(1, 37), f32(9, 37)},                   // rows, VV
		{f32(1, 37), f32(9, 37), f32(9, 37)},                   // rows, broadcast on the left
		{f32(9, 37), f32(9, 1), f32(9, 37)},                    // columns, VS
		{f32(9, 1), f32(9, 37), f32(9, 37)},                    // columns, SV
		{f32(3, 5, 2, 33), f32(1, 5, 1, 33), f32(3, 5, 2, 33)}, // deeper nest
		{f32(3, 5, 2, 33), f32(3, 1, 2, 1), f32(3, 5, 2, 33)},
	}
	ops := []backends.OpType{backends.OpTypeAdd, backends.OpTypeSub, backends.OpTypeMul,
		backends.OpTypeDiv, backends.OpTypeMax, backends.OpTypeMin}
	rng := rand.New(rand.NewPCG(18, 3))
	for _, level := range vecLevels() {
		for pi, pl := range plans {
			p := newBcastPlan(pl.lhs, pl.rhs, pl.out)
			if p.kind != bcastGeneral || len(p.outerDims) > vecMaxNest {
				t.Fatalf("plan %d: kind %d with %d outer axes, want a nest", pi, p.kind, len(p.outerDims))
			}
			layout := map[bcastKind]int{bcastSame: vecVV, bcastRhsScalar: vecVS, bcastLhsScalar: vecSV}[p.inner]
			rows := p.size / p.innerLen
			for _, op := range ops {
				code, _ := vecBinaryCode(op)
				x, y := vecInput(rng, pl.lhs.Size(), false), vecInput(rng, pl.rhs.Size(), false)
				want := make([]float32, p.size)
				binaryNumber(op, p, want, x, y)
				for _, lo := range []int{0, 1, rows / 2} {
					got := make([]float32, p.size)
					copy(got[:lo*p.innerLen], want)
					vecBinaryNestAt(level, code, layout, got, x, y, p.innerLen, p.outerDims, p.outerL, p.outerR, lo, rows)
					for i := range want {
						if !sameBits(got[i], want[i]) {
							t.Fatalf("%s plan %d %s from row %d, element %d: %v vs Go %v", vecLevelName(level), pi, op, lo, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestVecMaxRowsMatchesReduce: the C max and min over rows give kernels.Reduce's bits at every
// level (special values included), and ReduceMax/ReduceMin over trailing axes take them in a
// program, over other axes not.
func TestVecMaxRowsMatchesReduce(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("C kernels not compiled in")
	}
	rng := rand.New(rand.NewPCG(18, 6))
	for _, level := range vecLevels() {
		for _, n := range []int{1, 7, 16, 33, 256, 2051} {
			for _, op := range []kernels.ReduceOp{kernels.ReduceMax, kernels.ReduceMin} {
				rows := 5
				x := vecInput(rng, rows*n, false)
				// Rows of only zeros of both signs, and rows with one NaN.
				for i := range n {
					x[i] = []float32{0, f32bits(0x80000000)}[rng.IntN(2)]
				}
				x[n+rng.IntN(n)] = f32bits(0x7fc00000)
				want := make([]float32, rows)
				kernels.Reduce(want, x, []int{rows, n}, []int{1}, op)
				got := make([]float32, rows)
				vecMaxRowsAt(level, op == kernels.ReduceMin, got, x, n)
				for i := range want {
					if !sameBits(got[i], want[i]) {
						t.Fatalf("%s Reduce%s n=%d row %d: %v [%#08x], Go %v [%#08x]", vecLevelName(level), op, n, i,
							got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
	b := &Backend{}
	dims := []int{6, 5, 40}
	s := shapes.Make(dtypes.Float32, dims...)
	x := vecInput(rng, s.Size(), false)
	for _, c := range []struct {
		axes     []int
		trailing bool
	}{{[]int{2}, true}, {[]int{1, 2}, true}, {[]int{2, 1}, true}, {[]int{0, 1, 2}, true}, {[]int{1}, false}, {[]int{0, 2}, false}} {
		outN := 1
		for a, d := range dims {
			if !slices.Contains(c.axes, a) {
				outN *= d
			}
		}
		probe := &Buffer{shape: shapes.Make(dtypes.Float32, outN), flat: make([]float32, outN)}
		if took := vecMaxRows(probe, &Buffer{shape: s, flat: x}, reduceParams{axes: c.axes, op: kernels.ReduceMax}); took != c.trailing {
			t.Errorf("axes %v: C kernel taken %v, want %v", c.axes, took, c.trailing)
		}
		want := make([]float32, outN)
		kernels.Reduce(want, x, dims, c.axes, kernels.ReduceMax)
		g := fusionGraph{params: []shapes.Shape{s}, build: func(bld backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(bld.ReduceMax(p[0], c.axes...))}
		}}
		outs, _ := g.compileAndRun(t, b, []any{x})
		got := outs[0].([]float32)
		for i := range want {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("axes %v element %d: program %v, kernels.Reduce %v", c.axes, i, got[i], want[i])
			}
		}
	}
}
