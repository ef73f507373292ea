package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/runtime/cpu/blas"
)

// recordingBackend is a cpu backend that keeps the executables it compiles, for tests that
// build their graphs with GoMLX (graph.Gradient) and then look at the programs.
type recordingBackend struct {
	*Backend
	mu   *sync.Mutex
	exes *[]*Executable
}

type recordingBuilder struct {
	*Builder
	rec recordingBackend
}

func newRecordingBackend(b *Backend) recordingBackend {
	return recordingBackend{Backend: b, mu: &sync.Mutex{}, exes: new([]*Executable)}
}

func (r recordingBackend) Builder(name string) backends.Builder {
	return recordingBuilder{Builder: r.Backend.Builder(name).(*Builder), rec: r}
}

func (r recordingBuilder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	exe, err := r.Builder.Compile(outputs, shardings)
	if err == nil {
		r.rec.mu.Lock()
		*r.rec.exes = append(*r.rec.exes, exe.(*Executable))
		r.rec.mu.Unlock()
	}
	return exe, err
}

// pairs counts the pairs of the programs compiled so far.
func (r recordingBackend) pairs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range *r.exes {
		for _, s := range e.steps {
			if s.paired {
				n++
			}
		}
	}
	return n
}

// linearGrads is a Linear layer's forward and backward: the gradients of a loss of tanh(x·w)
// with respect to x (dY·wᵀ) and w (xᵀ·dY), two independent products of the same size.
func linearGrads(in []*graph.Node) []*graph.Node {
	x, w, c := in[0], in[1], in[2]
	y := graph.Tanh(graph.Einsum("td,dh->th", x, w))
	loss := graph.ReduceAllSum(graph.Mul(y, c))
	return graph.Gradient(loss, x, w)
}

// TestPairedSameAsUnpaired runs graphs with independent products with and without pairing and
// requires the programs to have the expected pairs and the same outputs, run after run and
// from several goroutines at once (go test -race checks the pair's goroutine, the releases
// after it and the buffer pool).
//
// The outputs are compared within float32 rounding rather than bit for bit: a paired product
// runs on one thread, an unpaired one on OpenBLAS's pool, which with some kernels (Haswell's)
// sums some elements of C in another order (OpenBLAS 0.3.21 here: ~5% of the elements of a
// 2048×256×256 product differ in their last bits; with SkylakeX's kernels none do, and these
// outputs are the same bits).
func TestPairedSameAsUnpaired(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	// The smallest sizes blas.UsesPool hands to OpenBLAS's pool (2·m·n·k ≥ 2^22, m ≥ 16),
	// and twice that.
	const tok, d, h = 64, 128, 256
	f := func(dims ...int) *tensors.Tensor { return randF32(rng, dims...) }
	tests := []struct {
		name   string
		fn     any
		inputs []any
		pairs  int
	}{
		// The forward product precedes both gradients; dX and dW pair.
		{"linear-forward-backward", linearGrads, []any{f(tok, d), f(d, h), f(tok, h)}, 1},
		// q, k and v of one input: two pair, the third runs alone.
		{"qkv", func(x, wq, wk, wv *graph.Node) []*graph.Node {
			return []*graph.Node{graph.MatMul(x, wq), graph.Sin(graph.MatMul(x, wk)), graph.MatMul(x, wv)}
		}, []any{f(tok, d), f(d, h), f(d, h), f(d, h)}, 1},
		// The same weight read by both products, which its only readers.
		{"shared-weight", func(a, b, w *graph.Node) []*graph.Node {
			return []*graph.Node{graph.MatMul(a, w), graph.MatMul(b, w)}
		}, []any{f(tok, d), f(tok, d), f(d, h)}, 1},
		// Intermediates whose last use is the pair: one read by both products, one by each. They
		// are recycled after the pair, and the steps after it take their storage.
		{"inputs-die-at-pair", func(x, w1, w2 *graph.Node) *graph.Node {
			t, u, v := graph.Tanh(x), graph.Exp(graph.Neg(graph.Abs(x))), graph.Sin(x)
			a := graph.Add(graph.MatMul(t, w1), graph.MatMul(u, w2))
			b := graph.Add(graph.MatMul(t, w2), graph.MatMul(v, w1))
			return graph.Mul(graph.Exp(graph.Neg(graph.Abs(a))), graph.Cos(b))
		}, []any{f(tok, d), f(d, h), f(d, h)}, 2},
		// Products of different sizes (2× apart) do not pair.
		{"different-sizes", func(x, w1, w2 *graph.Node) []*graph.Node {
			return []*graph.Node{graph.MatMul(x, w1), graph.MatMul(x, w2)}
		}, []any{f(tok, d), f(d, h), f(d, 2*h)}, 0},
		// A product that reads the other cannot run beside it.
		{"dependent", func(x, w1, w2 *graph.Node) *graph.Node {
			return graph.MatMul(graph.Tanh(graph.MatMul(x, w1)), w2)
		}, []any{f(tok, d), f(d, h), f(h, d)}, 0},
		// Attention-style batches: sgemmBatch already runs their items side by side.
		{"batched-heads", func(q, k, v *graph.Node) []*graph.Node {
			return []*graph.Node{graph.Einsum("bqd,bkd->bqk", q, k), graph.Einsum("bqd,bkd->bqk", k, v)}
		}, []any{f(8, tok, 64), f(8, tok, 64), f(8, tok, 64)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			paired, unpaired := newRecordingBackend(&Backend{pairing: pairOn}), newRecordingBackend(&Backend{pairing: pairOff})
			auto := newRecordingBackend(&Backend{})
			want, err := run(t, unpaired, tc.fn, localClones(tc.inputs)...)
			if err != nil {
				t.Fatal(err)
			}
			e, err := graph.NewExecAny(paired, tc.fn)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Finalize()
			first, err := e.Exec(localClones(tc.inputs)...)
			if err != nil {
				t.Fatal(err)
			}
			wantPairs := tc.pairs
			if !blas.UsesPool(tok, h, d) {
				wantPairs = 0 // no OpenBLAS pool (or one core): nothing to pair
			}
			if got := paired.pairs(); got != wantPairs {
				t.Errorf("%d pairs, want %d", got, wantPairs)
			}
			if got := unpaired.pairs(); got != 0 {
				t.Errorf("with pairing off: %d pairs", got)
			}
			if _, err := run(t, auto, tc.fn, localClones(tc.inputs)...); err != nil {
				t.Fatal(err)
			}
			if !blas.SideBySidePays() {
				wantPairs = 0
			}
			if got := auto.pairs(); got != wantPairs {
				t.Errorf("by default, with OpenBLAS's %q kernels: %d pairs, want %d", blas.CoreName(), got, wantPairs)
			}
			for i := range want {
				if err := closeNorm(flatOf(first[i]).([]float32), flatOf(want[i]).([]float32)); err != nil {
					t.Errorf("output %d: %v", i, err)
				}
			}
			// Again, from several goroutines: bit for bit the first run's results.
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for range 3 {
				wg.Go(func() {
					got, err := e.Exec(localClones(tc.inputs)...)
					if err != nil {
						errs <- err
						return
					}
					for i := range got {
						if !reflect.DeepEqual(flatOf(got[i]), flatOf(first[i])) {
							errs <- fmt.Errorf("output %d differs from the first run's", i)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// closeNorm requires ‖got−want‖ ≤ 1e-5·‖want‖: the sums of a few hundred float32 terms in
// another order (1.2e-6 seen with Haswell's kernels; elementwise relative error is meaningless
// for the entries that cancel to nearly zero).
func closeNorm(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var diff, norm float64
	for i, w := range want {
		d := float64(got[i]) - float64(w)
		diff += d * d
		norm += float64(w) * float64(w)
	}
	if !(math.Sqrt(diff) <= 1e-5*math.Sqrt(norm)) {
		return fmt.Errorf("relative difference %.3g", math.Sqrt(diff/norm))
	}
	return nil
}

// TestPairProducts checks the pass itself on programs with every DotGeneral a candidate (so
// that it runs without OpenBLAS too): the pairs it makes, that they are adjacent and
// independent, and that the order stays topological.
func TestPairProducts(t *testing.T) {
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	mm := func(b backends.Builder, x, w backends.Op) backends.Op {
		return must(b.DotGeneral(x, []int{1}, nil, w, []int{0}, nil))
	}
	tests := []struct {
		name   string
		params []shapes.Shape
		build  func(b backends.Builder, p []backends.Op) []backends.Op
		pairs  int
	}{
		{"qkv-with-steps-between", []shapes.Shape{f32(8, 4), f32(4, 6), f32(4, 6), f32(4, 6)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			q := must(b.Tanh(mm(b, p[0], p[1])))
			k := must(b.Exp(must(b.Neg(mm(b, p[0], p[2])))))
			v := mm(b, p[0], p[3])
			return []backends.Op{q, k, v}
		}, 1},
		// The second product reads a step computed after the first: it moves before the
		// first, so the first moves down to it.
		{"partner-input-between", []shapes.Shape{f32(8, 4), f32(4, 6), f32(4, 6)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			y1 := mm(b, p[0], p[1])
			s := must(b.Sin(y1)) // depends on the first: moves after the pair
			x2 := must(b.Cos(p[0]))
			y2 := mm(b, x2, p[2])
			return []backends.Op{must(b.Add(s, y2))}
		}, 1},
		// Four products: the second and fourth read the first; the first pairs with the third,
		// then the second with the fourth.
		{"two-rounds", []shapes.Shape{f32(8, 8), f32(8, 8), f32(8, 8)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			y1 := mm(b, p[0], p[1])
			y2 := mm(b, y1, p[2])
			y3 := mm(b, p[0], p[2])
			y4 := mm(b, y1, p[1])
			return []backends.Op{y2, y3, y4}
		}, 2},
		{"chain", []shapes.Shape{f32(8, 8), f32(8, 8)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{mm(b, mm(b, mm(b, p[0], p[1]), p[1]), p[1])}
		}, 0},
		{"sizes-apart", []shapes.Shape{f32(8, 8), f32(8, 8), f32(8, 11)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{mm(b, p[0], p[1]), mm(b, p[0], p[2])}
		}, 0},
	}
	every := func(n *node) (int, bool) {
		if n.op != backends.OpTypeDotGeneral {
			return 0, false
		}
		p := n.data.(*dotPlan)
		return 2 * p.batch * p.m * p.n * p.k, true
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bld := (&Backend{pairing: pairOff}).Builder(t.Name())
			ps := make([]backends.Op, len(tc.params))
			for i, s := range tc.params {
				ps[i] = must(bld.Parameter(fmt.Sprintf("p%d", i), s, nil))
			}
			exe, err := bld.Compile(tc.build(bld, ps), nil)
			if err != nil {
				t.Fatal(err)
			}
			steps := exe.(*Executable).steps
			again := append([]step(nil), steps...)
			if got := pairProducts(steps, every); got != tc.pairs {
				t.Errorf("%d pairs, want %d", got, tc.pairs)
			}
			pairProducts(again, every)
			computed := map[int]bool{} // nodes the program computes (not parameters)
			for _, s := range steps {
				computed[s.n.idx] = true
			}
			done := map[int]bool{}
			for i, s := range steps {
				if again[i].n != s.n || again[i].paired != s.paired {
					t.Errorf("step %d differs between two passes over the same program", i)
				}
				for _, in := range s.inputs {
					if computed[in] && !done[in] {
						t.Errorf("step %d (%s) reads node %d before it is computed", i, s.n.op, in)
					}
				}
				done[s.n.idx] = true
				if s.paired {
					next := steps[i+1]
					if _, ok := every(s.n); !ok || next.paired {
						t.Errorf("step %d: pair of %s and %s", i, s.n.op, next.n.op)
					}
					for _, in := range next.inputs {
						if in == s.n.idx {
							t.Errorf("step %d: the pair's second reads the first", i)
						}
					}
				}
			}
		})
	}
}

// TestPairFailures: a panic or an error in either step of a pair is the execution's error,
// once both have finished.
func TestPairFailures(t *testing.T) {
	const tok, d, h = 64, 128, 256
	if !blas.UsesPool(tok, h, d) {
		t.Skip("no pairs without OpenBLAS's pool:", blas.Name())
	}
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	for _, tc := range []struct {
		name string
		fn   execFn
		want string
	}{
		{"panic", func(*execution, *node, []*Buffer, []bool) (*Buffer, error) { panic("kernel bug") }, "panic: kernel bug"},
		{"error", func(*execution, *node, []*Buffer, []bool) (*Buffer, error) { return nil, fmt.Errorf("bad operand") }, "DotGeneral: bad operand"},
	} {
		for k := range 2 {
			t.Run(fmt.Sprintf("%s-in-step-%d", tc.name, k), func(t *testing.T) {
				b := &Backend{pairing: pairOn}
				bld := b.Builder(t.Name())
				x := must(bld.Parameter("x", f32(tok, d), nil))
				w := must(bld.Parameter("w", f32(d, h), nil))
				mm := func() backends.Op { return must(bld.DotGeneral(x, []int{1}, nil, w, []int{0}, nil)) }
				exe, err := bld.Compile([]backends.Op{mm(), mm()}, nil)
				if err != nil {
					t.Fatal(err)
				}
				steps := exe.(*Executable).steps
				if len(steps) != 2 || !steps[0].paired {
					t.Fatalf("program of %d steps, first paired %v: want one pair", len(steps), steps[0].paired)
				}
				steps[k].fn = tc.fn
				in := []backends.Buffer{mustBuffer(t, b, make([]float32, tok*d), tok, d), mustBuffer(t, b, make([]float32, d*h), d, h)}
				if _, err := exe.Execute(in, nil, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("got %v, want an error with %q", err, tc.want)
				}
			})
		}
	}
}
