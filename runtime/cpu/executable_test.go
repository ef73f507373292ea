package cpu

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func TestNewConfig(t *testing.T) {
	for _, cfg := range []string{"", " "} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%q): %v", cfg, err)
		}
	}
	_, err := New("threads=4")
	if err == nil || !strings.Contains(err.Error(), `unknown configuration "threads=4"`) {
		t.Errorf("New(threads=4) = %v, want an unknown-configuration error", err)
	}
	b, err := backends.NewWithConfig("cpu:")
	if err != nil {
		t.Fatalf(`NewWithConfig("cpu:"): %v`, err)
	}
	if b.Name() != "cpu" || b.NumDevices() != 1 || !strings.Contains(b.Description(), "GEMM") {
		t.Errorf("name %q, %d devices, description %q", b.Name(), b.NumDevices(), b.Description())
	}
}

// TestCapabilitiesMatchExecutors: every op the backend claims has an executor, or is built
// from other ops (Clamp, Dot) or set up before the program runs (Parameter, Constant).
func TestCapabilitiesMatchExecutors(t *testing.T) {
	b, _ := New("")
	composite := []backends.OpType{backends.OpTypeParameter, backends.OpTypeConstant, backends.OpTypeClamp, backends.OpTypeDot}
	for op := range b.Capabilities().Operations {
		if _, ok := executors[op]; !ok && !slices.Contains(composite, op) {
			t.Errorf("capability %s has no executor", op)
		}
	}
	for op := range executors {
		if !b.Capabilities().Operations[op] {
			t.Errorf("executor for %s not listed in Capabilities", op)
		}
	}
}

func TestNotImplementedError(t *testing.T) {
	cpu, _ := testBackends()
	_, err := run(t, cpu, func(x *graph.Node) *graph.Node { return graph.Bitcast(x, dtypes.Int32) }, []float32{1, 2})
	if err == nil || !strings.Contains(err.Error(), "not implemented by the cpu backend: Bitcast") {
		t.Errorf("Bitcast: got %v, want a clear not-implemented error", err)
	}
	bld := cpu.Builder("fft")
	x, err := bld.Parameter("x", shapes.Make(dtypes.Float32, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bld.FFT(x, backends.FFTForward, []int{4}); err == nil || err.Error() != "not implemented by the cpu backend: FFT" {
		t.Errorf("FFT: got %v", err)
	}
	if _, err := bld.Constant([]uint16{1}, 1); err == nil || !strings.Contains(err.Error(), "Uint16 is not supported") {
		t.Errorf("Constant(uint16): got %v", err)
	}
}

// buildAndRun compiles build's outputs on a fresh builder and executes them on inputs.
func buildAndRun(t *testing.T, b backends.Backend, params []shapes.Shape, build func(bld backends.Builder, p []backends.Op) []backends.Op,
	inputs []backends.Buffer, donate []bool) []backends.Buffer {
	t.Helper()
	bld := b.Builder(t.Name())
	ps := make([]backends.Op, len(params))
	for i, s := range params {
		var err error
		if ps[i], err = bld.Parameter(fmt.Sprintf("p%d", i), s, nil); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := bld.Compile(build(bld, ps), nil)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exe.Execute(inputs, donate, 0)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

func mustBuffer(t *testing.T, b backends.Backend, flat []float32, dims ...int) backends.Buffer {
	t.Helper()
	buf, err := b.BufferFromFlatData(0, flat, shapes.Make(dtypes.Float32, dims...))
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func readFloats(t *testing.T, b backends.Backend, buf backends.Buffer) []float32 {
	t.Helper()
	s, err := b.BufferShape(buf)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, s.Size())
	if err := b.BufferToFlatData(buf, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func must(op backends.Op, err error) backends.Op {
	if err != nil {
		panic(err)
	}
	return op
}

// TestInPlaceAndAliasing runs graphs whose buffers the executor may recycle or overwrite, and
// checks that no input, constant or output is clobbered.
func TestInPlaceAndAliasing(t *testing.T) {
	b, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	vec := shapes.Make(dtypes.Float32, 4)
	xs := []float32{1, 2, 3, 4}

	t.Run("inputs-untouched", func(t *testing.T) {
		x := mustBuffer(t, b, xs, 4)
		// y = -x dies at z = y + x: z may be written into y, never into x. Outputs z, w, and
		// Reshape(x) (which must be a copy: the caller still owns x).
		outs := buildAndRun(t, b, []shapes.Shape{vec}, func(bld backends.Builder, p []backends.Op) []backends.Op {
			y := must(bld.Neg(p[0]))
			z := must(bld.Add(y, p[0]))
			w := must(bld.Mul(z, p[0]))
			return []backends.Op{w, z, must(bld.Reshape(p[0], 2, 2)), must(bld.Identity(p[0]))}
		}, []backends.Buffer{x}, nil)
		if got := readFloats(t, b, x); !slices.Equal(got, xs) {
			t.Errorf("input changed: %v", got)
		}
		if got := readFloats(t, b, outs[0]); !slices.Equal(got, []float32{0, 0, 0, 0}) {
			t.Errorf("w = %v", got)
		}
		if err := b.BufferFinalize(x); err != nil {
			t.Fatal(err)
		}
		// The Reshape and Identity outputs are copies: finalizing x (whose storage is
		// recycled) and allocating again must not change them.
		_ = mustBuffer(t, b, []float32{9, 9, 9, 9}, 4)
		for _, o := range outs[2:] {
			if got := readFloats(t, b, o); !slices.Equal(got, xs) {
				t.Errorf("output aliasing the input: %v", got)
			}
		}
	})

	t.Run("donated", func(t *testing.T) {
		x := mustBuffer(t, b, xs, 4)
		outs := buildAndRun(t, b, []shapes.Shape{vec}, func(bld backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(bld.Exp(must(bld.Neg(p[0]))))}
		}, []backends.Buffer{x}, []bool{true})
		if _, err := b.BufferShape(x); err == nil {
			t.Error("donated input still valid")
		}
		got := readFloats(t, b, outs[0])
		if len(got) != 4 || got[0] > 0.37 || got[0] < 0.36 {
			t.Errorf("exp(-x) = %v", got)
		}
	})

	t.Run("constant-output-twice", func(t *testing.T) {
		bld := b.Builder("const")
		c := must(bld.Constant([]float32{5, 6}, 2))
		exe, err := bld.Compile([]backends.Op{c, c, must(bld.Neg(c))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			outs, err := exe.Execute(nil, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range [][]float32{{5, 6}, {5, 6}, {-5, -6}} {
				if got := readFloats(t, b, outs[i]); !slices.Equal(got, want) {
					t.Fatalf("output %d = %v, want %v", i, got, want)
				}
			}
			// Scribble over the returned buffers: the constant must survive.
			flat, _ := b.BufferData(outs[0])
			flat.([]float32)[0] = -1
			flat, _ = b.BufferData(outs[1])
			flat.([]float32)[1] = -1
		}
	})

	t.Run("shared-buffer", func(t *testing.T) {
		buf, flat, err := b.NewSharedBuffer(0, vec)
		if err != nil {
			t.Fatal(err)
		}
		copy(flat.([]float32), xs)
		outs := buildAndRun(t, b, []shapes.Shape{vec}, func(bld backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(bld.Add(p[0], p[0]))}
		}, []backends.Buffer{buf}, []bool{true}) // shared buffers are never donated
		if !slices.Equal(flat.([]float32), xs) {
			t.Errorf("shared input changed: %v", flat)
		}
		if got := readFloats(t, b, outs[0]); !slices.Equal(got, []float32{2, 4, 6, 8}) {
			t.Errorf("x+x = %v", got)
		}
	})

	t.Run("bad-inputs", func(t *testing.T) {
		if _, err := b.BufferFromFlatData(0, []float32{1, 2}, vec); err == nil {
			t.Error("BufferFromFlatData accepted 2 values for 4")
		}
		if _, err := b.BufferFromFlatData(0, []int32{1, 2, 3, 4}, vec); err == nil {
			t.Error("BufferFromFlatData accepted int32 values for float32")
		}
		bld := b.Builder("bad")
		p := must(bld.Parameter("x", vec, nil))
		exe, err := bld.Compile([]backends.Op{must(bld.Neg(p))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := exe.Execute([]backends.Buffer{mustBuffer(t, b, []float32{1, 2}, 2)}, nil, 0); err == nil {
			t.Error("Execute accepted an input of the wrong shape")
		}
	})

	t.Run("integer-division-by-zero", func(t *testing.T) {
		bld := b.Builder("div0")
		x := must(bld.Constant([]int32{1, 2}, 2))
		z := must(bld.Constant([]int32{1, 0}, 2))
		exe, err := bld.Compile([]backends.Op{must(bld.Div(x, z))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := exe.Execute(nil, nil, 0); err == nil || !strings.Contains(err.Error(), "divide by zero") {
			t.Errorf("got %v, want a division-by-zero error", err)
		}
	})
}

// mlpLoss is a small two-layer perceptron with a softmax cross-entropy-like loss and an
// attention-style product, differentiated with respect to its weights.
func mlpLoss(x, w1, w2, target *graph.Node) []*graph.Node {
	h := graph.Tanh(graph.Einsum("bd,dh->bh", x, w1))
	att := graph.Einsum("bh,ch->bc", h, h)
	att = graph.Sub(att, graph.ReduceAndKeep(att, graph.ReduceMax, -1))
	att = graph.Div(graph.Exp(att), graph.ReduceAndKeep(graph.Exp(att), graph.ReduceSum, -1))
	h = graph.Einsum("bc,ch->bh", att, h)
	logits := graph.Einsum("bh,ho->bo", h, w2)
	logp := graph.Sub(logits, graph.Log(graph.ReduceAndKeep(graph.Exp(logits), graph.ReduceSum, -1)))
	loss := graph.Neg(graph.ReduceAllMean(graph.Mul(logp, target)))
	grads := graph.Gradient(loss, w1, w2)
	return append([]*graph.Node{loss}, grads...)
}

func TestGradientMatchesSimpleGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	target := make([]float32, 6*5)
	for i := range 6 {
		target[i*5+rng.IntN(5)] = 1
	}
	check(t, func(in []*graph.Node) []*graph.Node { return mlpLoss(in[0], in[1], in[2], in[3]) },
		randF32(rng, 6, 8), scaled(randF32(rng, 8, 16), 0.3), scaled(randF32(rng, 16, 5), 0.3),
		tensors.FromFlatDataAndDimensions(target, 6, 5))
}

// TestConcurrentExecutions runs one Exec from several goroutines at once (go test -race
// checks the pool and the executor) and requires every result to equal a serial run's.
func TestConcurrentExecutions(t *testing.T) {
	cpu, _ := testBackends()
	e, err := graph.NewExecAny(cpu, func(in []*graph.Node) []*graph.Node { return mlpLoss(in[0], in[1], in[2], in[3]) })
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	rng := rand.New(rand.NewPCG(33, 34))
	const workers, rounds = 6, 5
	inputs := make([][]any, workers)
	want := make([][]*tensors.Tensor, workers)
	for w := range workers {
		inputs[w] = []any{randF32(rng, 6, 8), randF32(rng, 8, 16), randF32(rng, 16, 5), randF32(rng, 6, 5)}
		if want[w], err = e.Exec(inputs[w]...); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				got, err := e.Exec(inputs[w]...)
				if err != nil {
					errs <- err
					return
				}
				for i := range got {
					// Bit for bit: results must not depend on what runs concurrently.
					if gf, wf := flatOf(got[i]), flatOf(want[w][i]); !reflect.DeepEqual(gf, wf) {
						errs <- fmt.Errorf("worker %d output %d: %v, want %v", w, i, gf, wf)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
