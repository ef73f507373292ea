package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/runtime/cpu/blas"
)

// TestRoundBF16: float32 → bfloat16 rounds to nearest, ties to even, as XLA and PyTorch do;
// NaN stays NaN (quiet), overflow goes to infinity; RoundToBF16 keeps the result as float32.
func TestRoundBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f807fff, 0x3f80}, // below the tie
		{0x3f808000, 0x3f80}, // tie, even below
		{0x3f808001, 0x3f81}, // above the tie
		{0x3f818000, 0x3f82}, // tie, odd below: up to even
		{0xbf808000, 0xbf80}, // negative tie
		{0xbf818000, 0xbf82},
		{0x80000000, 0x8000}, // -0
		{0x00008000, 0x0000}, // subnormal tie
		{0x00018000, 0x0002},
		{0x7f7f7fff, 0x7f7f},
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to +Inf
		{0xff7fffff, 0xff80},
		{0x7f800000, 0x7f80}, // ±Inf
		{0xff800000, 0xff80},
		{0x7fc00000, 0x7fc0}, // quiet NaN
		{0x7f800001, 0x7fc0}, // signalling NaN whose payload is in the low bits: stays NaN
		{0xff800001, 0xffc0},
		{0x7fffffff, 0x7fff},
	} {
		f := math.Float32frombits(c.in)
		if got := uint16(RoundBF16(f)); got != c.want {
			t.Errorf("RoundBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
		r := []float32{f}
		RoundToBF16(r, r)
		if got := math.Float32bits(r[0]); got != uint32(c.want)<<16 {
			t.Errorf("RoundToBF16(%#08x) = %#08x, want %#08x", c.in, got, uint32(c.want)<<16)
		}
	}
}

// TestBF16ConversionKernels: the C conversions give the Go loops' bits at every level the CPU
// has, on random values, every exponent, ties and the special values.
func TestBF16ConversionKernels(t *testing.T) {
	if !vecCompiledIn {
		t.Skip("the C kernels are not compiled in")
	}
	rng := rand.New(rand.NewPCG(71, 72))
	n := 4099
	src := make([]float32, n)
	for i := range src {
		switch i % 4 {
		case 0:
			src[i] = float32(rng.NormFloat64())
		case 1:
			src[i] = math.Float32frombits(rng.Uint32()) // every exponent, NaNs and infinities
		case 2:
			src[i] = math.Float32frombits(rng.Uint32()&^0xffff | 0x8000) // ties
		default:
			src[i] = math.Float32frombits(rng.Uint32() | 0x7f800000) // infinities and NaNs
		}
	}
	wantNarrow := make([]bf16, n)
	wantRound := make([]float32, n)
	for i, f := range src {
		wantNarrow[i] = RoundBF16(f)
		wantRound[i] = math.Float32frombits(uint32(wantNarrow[i]) << 16)
	}
	for _, level := range vecLevels() {
		t.Run(vecLevelName(level), func(t *testing.T) {
			b16 := make([]bf16, n)
			bf16At(level, 0, src, b16, nil)
			rounded := make([]float32, n)
			bf16At(level, 2, src, nil, rounded)
			wide := make([]float32, n)
			bf16At(level, 1, wide, wantNarrow, nil)
			for i := range src {
				if b16[i] != wantNarrow[i] {
					t.Fatalf("narrow %#08x: %#04x, want %#04x", math.Float32bits(src[i]), b16[i], wantNarrow[i])
				}
				if math.Float32bits(rounded[i]) != math.Float32bits(wantRound[i]) {
					t.Fatalf("round %#08x: %#08x, want %#08x", math.Float32bits(src[i]), math.Float32bits(rounded[i]), math.Float32bits(wantRound[i]))
				}
				if math.Float32bits(wide[i]) != uint32(wantNarrow[i])<<16 {
					t.Fatalf("widen %#04x: %#08x", wantNarrow[i], math.Float32bits(wide[i]))
				}
			}
		})
	}
}

// withSbgemmMode runs f with the package's bfloat16 product mode set to mode.
func withSbgemmMode(mode sbgemmMode, f func()) {
	old := bf16GEMM.Swap(int32(mode))
	defer bf16GEMM.Store(old)
	f()
}

// bf16DotCases are DotGeneral products of bfloat16 operands on every path: Go loops (tiny),
// items side by side, one call per item on the pool, operands transposed by the product's
// flags, read in place through strided views (attention's layouts), or transposed first.
var bf16DotCases = []struct {
	name           string
	lhs, rhs       []int
	lc, lb, rc, rb []int
}{
	{"tiny", []int{3, 4}, []int{5, 4}, []int{1}, nil, []int{1}, nil},
	{"linear", []int{4, 7, 37}, []int{19, 37}, []int{2}, nil, []int{1}, nil},
	{"weight-gradient", []int{4, 7, 19}, []int{4, 7, 37}, []int{0, 1}, nil, []int{0, 1}, nil},
	{"large", []int{300, 256}, []int{700, 256}, []int{1}, nil, []int{1}, nil},
	{"scores", []int{2, 64, 4, 64}, []int{2, 64, 4, 64}, []int{3}, []int{0, 2}, []int{3}, []int{0, 2}},
	{"values", []int{2, 4, 64, 64}, []int{2, 64, 4, 32}, []int{3}, []int{0, 1}, []int{1}, []int{0, 2}},
	{"transA", []int{2, 5, 3, 40}, []int{2, 3, 5, 6}, []int{1}, []int{0, 2}, []int{2}, []int{0, 1}},
	{"batch-last", []int{4, 5, 3}, []int{5, 6, 3}, []int{1}, []int{2}, []int{0}, []int{2}},
}

// TestBF16DotGeneral: a DotGeneral of bfloat16 operands (converted from float32 in the graph,
// the product converted back, as runtime.DotGeneralIn builds it) is the bfloat16 rounding of
// the exact sum of products of the rounded operands, up to the float32 accumulation: each
// result lies between the roundings of sum ± k·2⁻²³·Σ|products|. Both product paths are checked
// (cblas_sbgemm forced, through its float32 fallback where the library lacks it, and the
// widened float32 one), and without cblas_sbgemm they give the same bits.
func TestBF16DotGeneral(t *testing.T) {
	cpu, _ := testBackends()
	rng := rand.New(rand.NewPCG(81, 82))
	t.Logf("cblas_sbgemm: %v; bfloat16 instructions: %q", blas.HasSbgemm(), blas.CPUBF16())
	for _, c := range bf16DotCases {
		t.Run(c.name, func(t *testing.T) {
			a, b := randF32(rng, c.lhs...), randF32(rng, c.rhs...)
			exec := func(fn any) []*tensors.Tensor {
				t.Helper()
				out, err := run(t, cpu, fn, a, b)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			ref := exec(func(a, b *graph.Node) (*graph.Node, *graph.Node) {
				a64 := graph.ConvertDType(graph.ConvertDType(a, dtypes.BFloat16), dtypes.Float64)
				b64 := graph.ConvertDType(graph.ConvertDType(b, dtypes.BFloat16), dtypes.Float64)
				return graph.DotGeneral(a64, c.lc, c.lb, b64, c.rc, c.rb),
					graph.DotGeneral(graph.Abs(a64), c.lc, c.lb, graph.Abs(b64), c.rc, c.rb)
			})
			sum, mag := flatOf(ref[0]).([]float64), flatOf(ref[1]).([]float64)
			k := 1
			for _, ax := range c.lc {
				k *= c.lhs[ax]
			}
			results := map[sbgemmMode][]float32{}
			for _, mode := range []sbgemmMode{sbgemmNever, sbgemmAlways} {
				var out []*tensors.Tensor
				withSbgemmMode(mode, func() {
					out = exec(func(a, b *graph.Node) *graph.Node {
						p := graph.DotGeneral(graph.ConvertDType(a, dtypes.BFloat16), c.lc, c.lb,
							graph.ConvertDType(b, dtypes.BFloat16), c.rc, c.rb)
						if p.DType() != dtypes.BFloat16 {
							t.Fatalf("product of dtype %s", p.DType())
						}
						return graph.ConvertDType(p, dtypes.Float32)
					})
				})
				got := flatOf(out[0]).([]float32)
				if len(got) != len(sum) {
					t.Fatalf("%d results, want %d", len(got), len(sum))
				}
				for i, g := range got {
					e := 2 * float64(k) * 0x1p-24 * mag[i]
					lo := RoundBF16(float32(sum[i] - e)).Float32()
					hi := RoundBF16(float32(sum[i] + e)).Float32()
					if !(g >= lo && g <= hi) || math.Float32bits(g)&0xffff != 0 {
						t.Fatalf("mode %d, element %d: %v (bits %#08x), want the bfloat16 rounding of %v ± %.3g: [%v, %v]",
							mode, i, g, math.Float32bits(g), sum[i], e, lo, hi)
					}
				}
				results[mode] = got
			}
			if !blas.HasSbgemm() {
				for i := range results[sbgemmNever] {
					if results[sbgemmNever][i] != results[sbgemmAlways][i] {
						t.Fatalf("element %d: widened %v, through Sbgemm's fallback %v", i, results[sbgemmNever][i], results[sbgemmAlways][i])
					}
				}
			}
		})
	}
}

// TestBF16OtherOps: ops without a bfloat16 kernel (arithmetic, reductions, comparisons, where)
// compute in float32 on the widened operands and round their result, as XLA's CPU compiler
// does; data movement (transpose, slice, concatenate, broadcast, gather, reverse, pad) moves
// bfloat16 values unchanged. Each is checked against the float32 op on the rounded values.
func TestBF16OtherOps(t *testing.T) {
	cpu, _ := testBackends()
	rng := rand.New(rand.NewPCG(91, 92))
	bf := func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.BFloat16) }
	f32 := func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }
	rounded := func(x *graph.Node) *graph.Node { return f32(bf(x)) }
	for _, c := range []struct {
		name string
		op   func(a, b *graph.Node) *graph.Node // on same-dtype operands [6, 40]
		// float32: the reference rounds op's float32 result too (arithmetic); false: op on
		// bfloat16 returns non-float values or moves data, compared as is.
		round bool
	}{
		{"add", graph.Add, true},
		{"mul-broadcast", func(a, b *graph.Node) *graph.Node { return graph.Mul(a, graph.Slice(b, graph.AxisRange(0, 1))) }, true},
		{"reduce-sum", func(a, _ *graph.Node) *graph.Node { return graph.ReduceSum(a, -1) }, true},
		{"exp", func(a, _ *graph.Node) *graph.Node { return graph.Exp(a) }, true},
		{"max", graph.Max, true},
		{"where", func(a, b *graph.Node) *graph.Node { return graph.Where(graph.GreaterThan(a, b), a, b) }, false},
		{"transpose", func(a, _ *graph.Node) *graph.Node { return graph.TransposeAllAxes(a, 1, 0) }, false},
		{"slice", func(a, _ *graph.Node) *graph.Node {
			return graph.Slice(a, graph.AxisRange(1, 4), graph.AxisRange(3, 30))
		}, false},
		{"concatenate", func(a, b *graph.Node) *graph.Node { return graph.Concatenate([]*graph.Node{a, b}, 0) }, false},
		{"broadcast", func(a, _ *graph.Node) *graph.Node { return graph.BroadcastToDims(graph.InsertAxes(a, 0), 3, 6, 40) }, false},
		{"gather", func(a, _ *graph.Node) *graph.Node {
			return graph.Gather(a, graph.Const(a.Graph(), [][]int32{{4}, {0}, {4}}))
		}, false},
		{"reverse", func(a, _ *graph.Node) *graph.Node { return graph.Reverse(a, 1) }, false},
		{"pad", func(a, _ *graph.Node) *graph.Node {
			return graph.Pad(a, graph.ScalarZero(a.Graph(), a.DType()), graph.PadAxis{Start: 1, End: 2}, graph.PadAxis{Interior: 1})
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := randF32(rng, 6, 40), randF32(rng, 6, 40)
			out, err := run(t, cpu, func(a, b *graph.Node) (*graph.Node, *graph.Node) {
				got := c.op(bf(a), bf(b))
				want := c.op(rounded(a), rounded(b))
				if c.round {
					want = rounded(want)
				}
				if got.DType() == dtypes.BFloat16 {
					got = f32(got)
				}
				return got, want
			}, a, b)
			if err != nil {
				t.Fatal(err)
			}
			if err := closeFlats(flatOf(out[0]), flatOf(out[1])); err != nil {
				t.Fatal(err)
			}
			g, w := fmt.Sprint(flatOf(out[0])), fmt.Sprint(flatOf(out[1]))
			if g != w {
				t.Fatalf("got %s\nwant %s", g, w)
			}
		})
	}
}

// TestBF16Buffers: bfloat16 tensors go to and from the backend, as inputs and constants.
func TestBF16Buffers(t *testing.T) {
	cpu, _ := testBackends()
	vals := []float32{1, -2.5, 3.140625, 0, 65280}
	b16 := make([]bf16, len(vals))
	for i, v := range vals {
		b16[i] = RoundBF16(v)
	}
	in := tensors.FromFlatDataAndDimensions(b16, len(vals))
	out, err := run(t, cpu, func(x *graph.Node) (*graph.Node, *graph.Node) {
		c := graph.Const(x.Graph(), b16)
		return graph.ConvertDType(x, dtypes.Float32), graph.ConvertDType(graph.Add(x, c), dtypes.Float32)
	}, in)
	if err != nil {
		t.Fatal(err)
	}
	got, sum := flatOf(out[0]).([]float32), flatOf(out[1]).([]float32)
	for i, v := range vals {
		if got[i] != v || sum[i] != RoundBF16(2*v).Float32() {
			t.Errorf("element %d: %v and %v, want %v and %v", i, got[i], sum[i], v, 2*v)
		}
	}
}

// TestBF16ConvertEveryPair: conversions to bfloat16 round the float32 value of the source to
// nearest even (integers, float64 through float32); conversions from bfloat16 convert its
// exact float32 value (to integers with Go's truncation, as from float32; to bool, x != 0).
func TestBF16ConvertEveryPair(t *testing.T) {
	cpu, _ := testBackends()
	rng := rand.New(rand.NewPCG(101, 102))
	vals := make([]float64, 40)
	for i := range vals {
		vals[i] = math.Round(rng.NormFloat64()*2000) / 8 // exact in float32, many not in bfloat16
		if i%5 == 0 {
			vals[i] = float64(rng.IntN(200)) // in uint8 range
		}
	}
	vals[1], vals[2] = 0, 1
	for _, dt := range supportedDTypes {
		if dt == dtypes.BFloat16 {
			continue
		}
		src := vals
		if dt == dtypes.Int32 || dt == dtypes.Int64 {
			src = make([]float64, len(vals))
			for i, v := range vals {
				src[i] = math.Trunc(v)
			}
		}
		if dt == dtypes.Uint8 {
			src = make([]float64, len(vals))
			for i, v := range vals {
				src[i] = math.Abs(math.Round(v)) - 256*math.Floor(math.Abs(math.Round(v))/256)
			}
		}
		var x *tensors.Tensor
		if dt == dtypes.Bool {
			b := make([]bool, len(vals))
			for i, v := range vals {
				b[i] = v != 0
			}
			x = tensors.FromFlatDataAndDimensions(b, len(vals))
		} else {
			x = fromFloat64s(dt, src, []int{len(vals)})
		}
		t.Run(dt.String(), func(t *testing.T) {
			out, err := run(t, cpu, func(x *graph.Node) (*graph.Node, *graph.Node) {
				b := graph.ConvertDType(x, dtypes.BFloat16)
				return graph.ConvertDType(b, dtypes.Float32), graph.ConvertDType(b, dt)
			}, x)
			if err != nil {
				t.Fatal(err)
			}
			got, back := flatOf(out[0]).([]float32), flatOf(out[1])
			for i, v := range src {
				if dt == dtypes.Bool && v != 0 {
					v = 1
				}
				want := RoundBF16(float32(v)).Float32()
				if got[i] != want {
					t.Fatalf("%s %v → bfloat16: %v, want %v", dt, v, got[i], want)
				}
				var wantBack any
				switch dt {
				case dtypes.Float32:
					wantBack = want
				case dtypes.Float64:
					wantBack = float64(want)
				case dtypes.Int32:
					wantBack = int32(want)
				case dtypes.Int64:
					wantBack = int64(want)
				case dtypes.Uint8:
					wantBack = uint8(want)
				case dtypes.Bool:
					wantBack = want != 0
				}
				if g := fmt.Sprint(reflectIndex(back, i)); g != fmt.Sprint(wantBack) {
					t.Fatalf("%s %v → bfloat16 → %s: %v, want %v", dt, v, dt, g, wantBack)
				}
			}
		})
	}
}

func reflectIndex(flat any, i int) any { return reflect.ValueOf(flat).Index(i).Interface() }

// TestBF16ConversionsFused: Compile lets bfloat16 products read the float32 sources of their
// operands' conversions and produce the float32 conversion of their result themselves
// (fuseBF16Dots): the conversions are no longer computed, and the bits are the unfused
// program's. A product also returned in bfloat16, or an operand already bfloat16, keeps its
// conversions or is widened as before.
func TestBF16ConversionsFused(t *testing.T) {
	fused, unfused := &Backend{}, &Backend{noFuse: true}
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	linear := func(b backends.Builder, x, w backends.Op) backends.Op {
		xb, wb := x, w
		if s, _ := b.OpShape(x); s.DType != dtypes.BFloat16 {
			xb = must(b.ConvertDType(x, dtypes.BFloat16))
		}
		if s, _ := b.OpShape(w); s.DType != dtypes.BFloat16 {
			wb = must(b.ConvertDType(w, dtypes.BFloat16))
		}
		return must(b.DotGeneral(xb, []int{1}, nil, wb, []int{1}, nil))
	}
	for _, c := range []struct {
		name     string
		params   []shapes.Shape
		build    func(b backends.Builder, p []backends.Op) []backends.Op
		converts int // ConvertDType steps left
		products int
	}{
		{"linear", []shapes.Shape{f32(40, 96), f32(70, 96)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(b.ConvertDType(linear(b, p[0], p[1]), dtypes.Float32))}
		}, 0, 1},
		{"large", []shapes.Shape{f32(300, 256), f32(700, 256)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(b.ConvertDType(linear(b, p[0], p[1]), dtypes.Float32))}
		}, 0, 1},
		{"shared-operand", []shapes.Shape{f32(40, 96), f32(30, 96), f32(70, 96)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			wb := must(b.ConvertDType(p[2], dtypes.BFloat16))
			return []backends.Op{must(b.ConvertDType(linear(b, p[0], wb), dtypes.Float32)),
				must(b.ConvertDType(linear(b, p[1], wb), dtypes.Float32))}
		}, 0, 2},
		{"bf16-output-too", []shapes.Shape{f32(40, 96), f32(70, 96)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			d := linear(b, p[0], p[1])
			return []backends.Op{d, must(b.ConvertDType(d, dtypes.Float32))}
		}, 1, 1},
		{"bf16-operand", []shapes.Shape{shapes.Make(dtypes.BFloat16, 40, 96), f32(70, 96)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(b.ConvertDType(linear(b, p[0], p[1]), dtypes.Float32))}
		}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(111, 112))
			inputs := make([]any, len(c.params))
			for i, s := range c.params {
				x := randFlat(rng, dtypes.Float32, s.Size()).([]float32)
				if s.DType == dtypes.BFloat16 {
					b := make([]bf16, len(x))
					for j, v := range x {
						b[j] = RoundBF16(v)
					}
					inputs[i] = b
					continue
				}
				inputs[i] = x
			}
			var results [2][]any
			for k, be := range []*Backend{fused, unfused} {
				bld := be.Builder(t.Name())
				ps := make([]backends.Op, len(c.params))
				for i, s := range c.params {
					ps[i] = must(bld.Parameter(fmt.Sprintf("p%d", i), s, nil))
				}
				exe, err := bld.Compile(c.build(bld, ps), nil)
				if err != nil {
					t.Fatal(err)
				}
				if k == 0 {
					converts, products := 0, 0
					for _, s := range exe.(*Executable).steps {
						switch s.n.op {
						case backends.OpTypeConvertDType:
							converts++
						case backends.OpTypeDotGeneral:
							products++
						}
					}
					if converts != c.converts || products != c.products {
						t.Errorf("fused program: %d conversions and %d products, want %d and %d", converts, products, c.converts, c.products)
					}
				}
				bufs := make([]backends.Buffer, len(inputs))
				for i, in := range inputs {
					if bufs[i], err = be.BufferFromFlatData(0, in, c.params[i]); err != nil {
						t.Fatal(err)
					}
				}
				res, err := exe.Execute(bufs, nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					results[k] = append(results[k], r.(*Buffer).flat)
				}
			}
			for i := range results[0] {
				if err := sameFlatBits(results[0][i], results[1][i]); err != nil {
					t.Errorf("output %d, fused vs unfused: %v", i, err)
				}
			}
		})
	}
}
