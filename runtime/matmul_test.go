package runtime

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func randTensor(rng *rand.Rand, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	return tensors.FromFlatDataAndDimensions(data, dims...)
}

// TestDotGeneralGradient compares the replacement gradients with GoMLX's own (slow but
// correct) ones on DotGenerals with batch axes, several contracting axes and permuted layouts.
func TestDotGeneralGradient(t *testing.T) {
	cases := []struct {
		name                   string
		lhsDims, rhsDims       []int
		lhsC, lhsB, rhsC, rhsB []int
		recorded               bool
	}{
		{"linear", []int{2, 3, 5}, []int{4, 5}, []int{2}, nil, []int{1}, nil, true},
		{"attention-scores", []int{2, 3, 6, 4}, []int{2, 3, 7, 4}, []int{3}, []int{0, 1}, []int{3}, []int{0, 1}, true},
		{"attention-values", []int{2, 3, 6, 7}, []int{2, 3, 7, 4}, []int{3}, []int{0, 1}, []int{2}, []int{0, 1}, true},
		{"permuted", []int{5, 2, 3, 4}, []int{4, 6, 2, 5}, []int{0, 3}, []int{1}, []int{3, 0}, []int{2}, true},
		{"parsed-from-description", []int{3, 4, 5}, []int{5, 3, 2}, []int{2}, []int{0}, []int{0}, []int{1}, false},
	}
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lhs, rhs := randTensor(rng, tc.lhsDims...), randTensor(rng, tc.rhsDims...)
			build := func(l, r *Node, recorded bool) []*Node {
				g := l.Graph()
				var out *Node
				if recorded {
					out = DotGeneralWithAxes(l, tc.lhsC, tc.lhsB, r, tc.rhsC, tc.rhsB)
				} else {
					out = DotGeneral(l, tc.lhsC, tc.lhsB, r, tc.rhsC, tc.rhsB)
				}
				if axes, ok := lookupDotAxes(out); !ok || !slices.Equal(axes.rhsContracting, tc.rhsC) || !slices.Equal(axes.lhsBatch, tc.lhsB) {
					t.Fatalf("axes of %s not found (%v, %v): the fast gradient would not be used", out, axes, ok)
				}
				// A non-uniform adjoint: weight the output by a fixed pattern.
				w := AddScalar(MulScalar(ConvertDType(IotaFull(g, out.Shape()), out.DType()), 0.01), 1)
				loss := ReduceAllSum(Mul(Mul(out, out), w))
				return Gradient(loss, l, r)
			}
			fixed, err := MustNewExec(b, func(l, r *Node) []*Node { return build(l, r, tc.recorded) }).Exec(lhs, rhs)
			if err != nil {
				t.Fatal(err)
			}
			// GoMLX's own gradient, registered back only while its graph is built.
			VJPRegistration[NodeTypeDotGeneral] = upstreamDotVJP
			upstreamExec := MustNewExec(b, func(l, r *Node) []*Node { return build(l, r, false) })
			want, err := upstreamExec.Exec(lhs, rhs)
			VJPRegistration[NodeTypeDotGeneral] = dotGeneralGrad
			if err != nil {
				t.Fatal(err)
			}
			for k := range 2 {
				got, exp := tensors.MustCopyFlatData[float32](fixed[k]), tensors.MustCopyFlatData[float32](want[k])
				for i := range exp {
					if math.Abs(float64(got[i]-exp[i])) > 1e-4*(1+math.Abs(float64(exp[i]))) {
						t.Fatalf("operand %d element %d: gradient %v, GoMLX's %v", k, i, got[i], exp[i])
					}
				}
			}
		})
	}
}

func TestDotGradient(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dims := range [][2][]int{{{3}, {3}}, {{4, 3}, {3}}, {{4, 3}, {3, 5}}} {
		a, c := randTensor(rng, dims[0]...), randTensor(rng, dims[1]...)
		build := func(x, y *Node) []*Node {
			out := Dot(x, y)
			return Gradient(ReduceAllSum(Mul(out, out)), x, y)
		}
		got, err := MustNewExec(b, build).Exec(a, c)
		if err != nil {
			t.Fatal(err)
		}
		// Reference: the same gradient through DotGeneral with GoMLX's original gradient.
		VJPRegistration[NodeTypeDotGeneral] = upstreamDotVJP
		want, err := MustNewExec(b, func(x, y *Node) []*Node {
			out := DotGeneral(x, []int{x.Rank() - 1}, nil, y, []int{0}, nil)
			return Gradient(ReduceAllSum(Mul(out, out)), x, y)
		}).Exec(a, c)
		VJPRegistration[NodeTypeDotGeneral] = dotGeneralGrad
		if err != nil {
			t.Fatal(err)
		}
		for k := range 2 {
			g, w := tensors.MustCopyFlatData[float32](got[k]), tensors.MustCopyFlatData[float32](want[k])
			for i := range w {
				if math.Abs(float64(g[i]-w[i])) > 1e-4*(1+math.Abs(float64(w[i]))) {
					t.Fatalf("dims %v operand %d element %d: %v, want %v", dims, k, i, g[i], w[i])
				}
			}
		}
	}
}
