package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// chainSteps compiles g on b and returns the number of steps of its program, and how many of
// them are chains.
func chainSteps(t *testing.T, b *Backend, g fusionGraph) (steps, chains int) {
	t.Helper()
	bld := b.Builder(t.Name())
	ps := make([]backends.Op, len(g.params))
	for i, s := range g.params {
		ps[i] = must(bld.Parameter(fmt.Sprintf("p%d", i), s, nil))
	}
	exe, err := bld.Compile(g.build(bld, ps), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range exe.(*Executable).steps {
		if _, ok := s.n.data.(*chainPlan); ok {
			chains++
		}
	}
	return len(exe.(*Executable).steps), chains
}

// TestElementwiseChainsSameBits runs graphs with chains (and trees) of elementwise ops with
// and without chaining (and broadcast fusion) and requires identical outputs and the expected
// programs.
func TestElementwiseChainsSameBits(t *testing.T) {
	fused, unfused := &Backend{}, &Backend{noFuse: true}
	type tc struct {
		name string
		g    fusionGraph
		// steps and chains of the fused program
		steps, chains int
	}
	var tests []tc
	for _, n := range []int{chainMinSize, 5*chainBlock + 17, 70001} {
		f32 := shapes.Make(dtypes.Float32, n)
		tests = append(tests,
			// SwiGLU: g·σ(g)·u. g is read by the chain's first op and by its second: the result
			// may not overwrite it block by block (the parameter is not the program's to
			// overwrite anyway; see "intermediate-head" for an owned one).
			tc{fmt.Sprintf("swiglu-%d", n), fusionGraph{[]shapes.Shape{f32, f32}, func(b backends.Builder, p []backends.Op) []backends.Op {
				return []backends.Op{must(b.Mul(must(b.Mul(p[0], must(b.Logistic(p[0])))), p[1]))}
			}}, 1, 1},
			// The chain's first input is an intermediate that dies in it and that a later op of
			// the chain also reads: the output must not be written into it.
			tc{fmt.Sprintf("intermediate-read-twice-%d", n), fusionGraph{[]shapes.Shape{f32, f32}, func(b backends.Builder, p []backends.Op) []backends.Op {
				g := must(b.Add(p[0], p[1])) // read twice: not in the chain
				other := must(b.Neg(p[1]))   // likewise
				return []backends.Op{must(b.Sub(must(b.Mul(must(b.Sqrt(must(b.Exp(g)))), g)), other)), must(b.Neg(other))}
			}}, 4, 1},
			// In place: the chain's first input dies in it and no op reads it after the first
			// that writes the output (Abs, once Tanh and Add have run into scratch).
			tc{fmt.Sprintf("intermediate-head-%d", n), fusionGraph{[]shapes.Shape{f32, f32, shapes.Make(dtypes.Float32)}, func(b backends.Builder, p []backends.Op) []backends.Op {
				h := must(b.Mul(p[0], p[1]))
				sum := must(b.ReduceSum(h, 0))
				c := must(b.Div(must(b.Add(must(b.Tanh(h)), p[2])), must(b.Sqrt(must(b.Abs(p[1]))))))
				return []backends.Op{c, sum}
			}}, 3, 1},
			// A sum built between allocations (a chunked head's weight gradient, acc + g₁ + g₂ + …):
			// chained, every gᵢ would live until the last Add; unchained, each dies at its own.
			tc{fmt.Sprintf("sum-between-allocations-%d", n), fusionGraph{[]shapes.Shape{f32, f32}, func(b backends.Builder, p []backends.Op) []backends.Op {
				acc := p[0]
				for range 3 {
					g := must(b.Concatenate(0, must(b.Slice(p[1], []int{n / 2}, []int{n}, []int{1})),
						must(b.Slice(p[1], []int{0}, []int{n / 2}, []int{1}))))
					acc = must(b.Add(acc, g))
				}
				return []backends.Op{acc}
			}}, 12, 0},
			// The same storage under a Reshape, read by a later op of the chain.
			tc{fmt.Sprintf("reshape-alias-%d", n), fusionGraph{[]shapes.Shape{f32, f32}, func(b backends.Builder, p []backends.Op) []backends.Op {
				h := must(b.Add(p[0], p[1]))
				h2 := must(b.Reshape(must(b.Reshape(h, 1, n)), n))
				return []backends.Op{must(b.Mul(must(b.Exp(h)), h2))}
			}}, 4, 1},
			// Scalar operands on either side, Pow, Max, and a two-operand head.
			tc{fmt.Sprintf("scalars-%d", n), fusionGraph{[]shapes.Shape{f32, f32, shapes.Make(dtypes.Float32)}, func(b backends.Builder, p []backends.Op) []backends.Op {
				x := must(b.Sub(p[0], p[1]))
				x = must(b.Pow(x, must(b.Constant([]float32{2}))))
				x = must(b.Div(p[2], must(b.Add(x, p[2]))))
				x = must(b.Max(x, p[0]))
				return []backends.Op{must(b.Log1p(must(b.Abs(x))))}
			}}, 1, 1},
			// Outputs inside what would be a chain end it there; Sin and Cos are two branches
			// of one chain.
			tc{fmt.Sprintf("output-inside-%d", n), fusionGraph{[]shapes.Shape{f32}, func(b backends.Builder, p []backends.Op) []backends.Op {
				a := must(b.Exp(must(b.Neg(p[0]))))
				return []backends.Op{a, must(b.Mul(must(b.Sin(a)), must(b.Cos(a))))}
			}}, 2, 2},
		)
	}
	// Chains through fused broadcasts run by whole rows.
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	for _, d := range [][2]int{{64, 256}, {300, 70}, {4, 4096}, {5000, 16}} {
		n, dim := d[0], d[1]
		full := f32(n, dim)
		tests = append(tests,
			// RMSNorm's x·r·w.
			tc{fmt.Sprintf("rmsnorm-%dx%d", n, dim), fusionGraph{[]shapes.Shape{full, f32(n, 1), f32(dim)}, func(b backends.Builder, p []backends.Op) []backends.Op {
				xr := must(b.Mul(p[0], must(b.BroadcastInDim(p[1], full, []int{0, 1}))))
				return []backends.Op{must(b.Mul(xr, must(b.BroadcastInDim(p[2], full, []int{1}))))}
			}}, 1, 1},
			// Softmax's exp(x − max) / sum, the sum taken in between (two chains).
			tc{fmt.Sprintf("softmax-%dx%d", n, dim), fusionGraph{[]shapes.Shape{full}, func(b backends.Builder, p []backends.Op) []backends.Op {
				mx := must(b.ReduceMax(p[0], 1))
				e := must(b.Exp(must(b.Sub(p[0], must(b.BroadcastInDim(mx, full, []int{0}))))))
				sum := must(b.ReduceSum(e, 1))
				return []backends.Op{must(b.Neg(must(b.Div(e, must(b.BroadcastInDim(sum, full, []int{0}))))))}
			}}, 4, 2},
		)
	}
	// RoPE's x·cos + rot·sin, rot = −x2·e0 + x1·e1: two levels of branches, rows of 32.
	tests = append(tests, tc{"rope-tree", fusionGraph{[]shapes.Shape{f32(300, 2, 32), f32(300, 1, 32), f32(300, 1, 32), f32(300, 1, 32), f32(300, 1, 32)},
		func(b backends.Builder, p []backends.Op) []backends.Op {
			e0, e1 := must(b.Constant([]float32{1, 0}, 1, 2, 1)), must(b.Constant([]float32{0, 1}, 1, 2, 1))
			rot := must(b.Add(must(b.Mul(must(b.Neg(p[1])), e0)), must(b.Mul(p[2], e1))))
			return []backends.Op{must(b.Add(must(b.Mul(p[0], p[3])), must(b.Mul(rot, p[4]))))}
		}}, 2, 1})
	// Broadcasting ops with different row lengths (32 and 64) split the chain.
	tests = append(tests, tc{"row-lengths-differ", fusionGraph{[]shapes.Shape{f32(300, 2, 32), f32(2), f32(300)}, func(b backends.Builder, p []backends.Op) []backends.Op {
		full := f32(300, 2, 32)
		x := must(b.Mul(p[0], must(b.BroadcastInDim(p[1], full, []int{1}))))
		x = must(b.Add(x, must(b.BroadcastInDim(p[2], full, []int{0}))))
		return []backends.Op{must(b.Exp(x))}
	}}, 2, 1})
	rng := rand.New(rand.NewPCG(18, 4))
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			inputs := c.g.randomInputs(rng)
			if steps, chains := chainSteps(t, fused, c.g); steps != c.steps || chains != c.chains {
				t.Errorf("fused program: %d steps, %d chains; want %d, %d", steps, chains, c.steps, c.chains)
			}
			want, _ := c.g.compileAndRun(t, unfused, inputs)
			got, _ := c.g.compileAndRun(t, fused, inputs)
			for i := range want {
				if err := sameFlatBits(got[i], want[i]); err != nil {
					t.Errorf("output #%d: chained vs op by op: %v", i, err)
				}
			}
		})
	}
}
