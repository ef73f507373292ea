package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// The two backends every test compares: ours and SimpleGo (the reference), one instance each
// for the whole test binary.
var testBackends = sync.OnceValues(func() (backends.Backend, backends.Backend) {
	cpu, err := backends.NewWithConfig("cpu")
	if err != nil {
		panic(err)
	}
	ref, err := backends.NewWithConfig("go:ops_sequential")
	if err != nil {
		panic(err)
	}
	return cpu, ref
})

// run executes fn (a graph function, as graph.NewExecAny takes) on backend b.
func run(t *testing.T, b backends.Backend, fn any, inputs ...any) ([]*tensors.Tensor, error) {
	t.Helper()
	e, err := graph.NewExecAny(b, fn)
	if err != nil {
		return nil, fmt.Errorf("NewExec: %w", err)
	}
	defer e.Finalize()
	return e.Exec(inputs...)
}

// check runs fn on the cpu backend and on SimpleGo with the same inputs and requires equal
// outputs (floats within 1e-5 relative).
func check(t *testing.T, fn any, inputs ...any) {
	t.Helper()
	cpu, ref := testBackends()
	want, err := run(t, ref, fn, localClones(inputs)...)
	if err != nil {
		t.Fatalf("SimpleGo: %v", err)
	}
	got, err := run(t, cpu, fn, localClones(inputs)...)
	if err != nil {
		t.Fatalf("cpu: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("cpu returned %d outputs, SimpleGo %d", len(got), len(want))
	}
	for i := range got {
		requireClose(t, fmt.Sprintf("output #%d", i), got[i], want[i])
	}
}

// localClones copies tensor inputs: a tensor, once on a backend, cannot be used on another.
func localClones(inputs []any) []any {
	out := make([]any, len(inputs))
	for i, in := range inputs {
		if t, ok := in.(*tensors.Tensor); ok {
			c, err := t.LocalClone()
			if err != nil {
				panic(err)
			}
			in = c
		}
		out[i] = in
	}
	return out
}

// requireClose compares shapes exactly and values within |got-want| <= 1e-6 + 1e-5·|want|
// (exact for integers and bools; NaN equals NaN, infinities must match).
func requireClose(t *testing.T, what string, got, want *tensors.Tensor) {
	t.Helper()
	if !got.Shape().Equal(want.Shape()) {
		t.Fatalf("%s: shape %s, want %s", what, got.Shape(), want.Shape())
	}
	g, w := flatOf(got), flatOf(want)
	if err := closeFlats(g, w); err != nil {
		t.Fatalf("%s (%s): %v", what, got.Shape(), err)
	}
}

func flatOf(t *tensors.Tensor) any {
	var out any
	if err := t.ConstFlatData(func(flat any) {
		v := reflect.ValueOf(flat)
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		out = c.Interface()
	}); err != nil {
		panic(err)
	}
	return out
}

func closeFlats(got, want any) error {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	if gv.Type() != wv.Type() || gv.Len() != wv.Len() {
		return fmt.Errorf("got %T[%d], want %T[%d]", got, gv.Len(), want, wv.Len())
	}
	for i := range gv.Len() {
		g, w := gv.Index(i), wv.Index(i)
		switch g.Kind() {
		case reflect.Float32, reflect.Float64:
			gf, wf := g.Float(), w.Float()
			if math.IsNaN(wf) || math.IsInf(wf, 0) {
				if !(math.IsNaN(wf) && math.IsNaN(gf)) && gf != wf {
					return fmt.Errorf("element %d: got %v, want %v", i, gf, wf)
				}
				continue
			}
			if math.Abs(gf-wf) > 1e-6+1e-5*math.Abs(wf) || math.IsNaN(gf) {
				return fmt.Errorf("element %d: got %v, want %v", i, gf, wf)
			}
		default:
			if g.Interface() != w.Interface() {
				return fmt.Errorf("element %d: got %v, want %v", i, g.Interface(), w.Interface())
			}
		}
	}
	return nil
}

// randTensor returns a tensor of random values: normal floats, small integers, random bools.
func randTensor(rng *rand.Rand, dt dtypes.DType, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	switch dt {
	case dtypes.Float32:
		f := make([]float32, n)
		for i := range f {
			f[i] = float32(rng.NormFloat64())
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Float64:
		f := make([]float64, n)
		for i := range f {
			f[i] = rng.NormFloat64()
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Int32:
		f := make([]int32, n)
		for i := range f {
			f[i] = int32(rng.IntN(21) - 10)
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Int64:
		f := make([]int64, n)
		for i := range f {
			f[i] = int64(rng.IntN(21) - 10)
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Uint8:
		f := make([]uint8, n)
		for i := range f {
			f[i] = uint8(rng.IntN(20))
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Bool:
		f := make([]bool, n)
		for i := range f {
			f[i] = rng.IntN(2) == 1
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	}
	panic(fmt.Sprintf("randTensor: dtype %s", dt))
}

// randF32 is randTensor for float32.
func randF32(rng *rand.Rand, dims ...int) *tensors.Tensor {
	return randTensor(rng, dtypes.Float32, dims...)
}

// positiveF32 returns floats in [0.1, 3.1), for Log, Sqrt, Pow and the like.
func positiveF32(rng *rand.Rand, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = 0.1 + 3*rng.Float32()
	}
	return tensors.FromFlatDataAndDimensions(f, dims...)
}

// indices returns int32 indices in [lo, hi).
func indices(rng *rand.Rand, lo, hi int, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	f := make([]int32, n)
	for i := range f {
		f[i] = int32(lo + rng.IntN(hi-lo))
	}
	return tensors.FromFlatDataAndDimensions(f, dims...)
}
