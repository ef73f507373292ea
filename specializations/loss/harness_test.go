package loss

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego" // the pure-Go backend; never the default XLA (it downloads)
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// testBackend is SimpleGo with an unlimited worker pool (the default pool can
// deadlock) and ops executed one after another: v0.26's parallel op
// executor has data races on its buffer-ownership counters (go test -race flags
// exec.go:430 against :478, and a buffer reused in place while another op reads it).
var testBackend = sync.OnceValues(func() (backends.Backend, error) {
	return backends.NewWithConfig("go:parallelism=-1,ops_sequential")
})

func backend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := testBackend()
	if err != nil {
		t.Fatalf("SimpleGo backend: %v", err)
	}
	return b
}

// arr is a dense float64 array with its dimensions (nil dims = scalar).
type arr struct {
	data []float64
	dims []int
}

func scalarArr(v float64) arr { return arr{data: []float64{v}} }

func matrix(rows [][]float64) arr {
	a := arr{dims: []int{len(rows), 0}}
	if len(rows) > 0 {
		a.dims[1] = len(rows[0])
	}
	for _, r := range rows {
		a.data = append(a.data, r...)
	}
	return a
}

func vector(v []float64) arr { return arr{data: append([]float64(nil), v...), dims: []int{len(v)}} }

func (a arr) rows() [][]float64 {
	if len(a.dims) != 2 {
		panic(fmt.Sprintf("rows of a rank-%d array", len(a.dims)))
	}
	out := make([][]float64, a.dims[0])
	for i := range out {
		out[i] = a.data[i*a.dims[1] : (i+1)*a.dims[1]]
	}
	return out
}

func (a arr) reshape(dims ...int) arr { return arr{data: a.data, dims: dims} }

func (a arr) tensor() *tensors.Tensor {
	return tensors.FromFlatDataAndDimensions(append([]float64(nil), a.data...), a.dims...)
}

func (a arr) tensor32() *tensors.Tensor {
	d := make([]float32, len(a.data))
	for i, v := range a.data {
		d[i] = float32(v)
	}
	return tensors.FromFlatDataAndDimensions(d, a.dims...)
}

// parseArr decodes a JSON number or nested array of numbers.
func parseArr(raw json.RawMessage) (arr, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return arr{}, err
	}
	var a arr
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		switch x := v.(type) {
		case float64:
			a.data = append(a.data, x)
			return nil
		case bool:
			if x {
				a.data = append(a.data, 1)
			} else {
				a.data = append(a.data, 0)
			}
			return nil
		case []any:
			if depth == len(a.dims) {
				a.dims = append(a.dims, len(x))
			} else if a.dims[depth] != len(x) {
				return fmt.Errorf("ragged array at depth %d", depth)
			}
			for _, e := range x {
				if err := walk(e, depth+1); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return a, walk(v, 0)
}

// graphOutputs are the named outputs a test graph returns.
type graphOutputs map[string]*Node

// runGraph compiles build over the given inputs (float64 parameters, in order) on
// SimpleGo, runs it once and returns every named output as an arr.
func runGraph(t testing.TB, inputs []arr, build func(in []*Node) (graphOutputs, error)) map[string]arr {
	t.Helper()
	out, err := runGraphErr(backend(t), inputs, build)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runGraphErr(be backends.Backend, inputs []arr, build func(in []*Node) (graphOutputs, error)) (map[string]arr, error) {
	return runGraphAs(be, false, inputs, build)
}

// runGraph32 is runGraph with float32 inputs (outputs are converted back to float64).
func runGraph32(t testing.TB, inputs []arr, build func(in []*Node) (graphOutputs, error)) map[string]arr {
	t.Helper()
	out, err := runGraphAs(backend(t), true, inputs, build)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runGraphAs(be backends.Backend, f32 bool, inputs []arr, build func(in []*Node) (graphOutputs, error)) (map[string]arr, error) {
	ev, err := newEvaluator(be, f32, build)
	if err != nil {
		return nil, err
	}
	defer ev.exec.Finalize()
	return ev.run(inputs)
}

// evaluator compiles a test graph once and runs it on many inputs of one shape
// (finite differences evaluate the same loss dozens of times).
type evaluator struct {
	exec     *Exec
	f32      bool
	keys     []string
	buildErr error
}

func newEvaluator(be backends.Backend, f32 bool, build func(in []*Node) (graphOutputs, error)) (*evaluator, error) {
	ev := &evaluator{f32: f32}
	exec, err := NewExec(be, func(in []*Node) []*Node {
		outs, err := build(in)
		if err != nil {
			ev.buildErr = err
			return []*Node{Scalar(in[0].Graph(), in[0].DType(), 0)}
		}
		ev.keys = ev.keys[:0]
		for k := range outs {
			ev.keys = append(ev.keys, k)
		}
		sort.Strings(ev.keys)
		nodes := make([]*Node, len(ev.keys))
		for i, k := range ev.keys {
			nodes[i] = outs[k]
		}
		return nodes
	})
	if err != nil {
		return nil, err
	}
	ev.exec = exec
	return ev, nil
}

func (ev *evaluator) run(inputs []arr) (map[string]arr, error) {
	args := make([]any, len(inputs))
	for i, a := range inputs {
		args[i] = a.tensor()
		if ev.f32 {
			args[i] = a.tensor32()
		}
	}
	res, err := ev.exec.Exec(args...)
	if err != nil {
		return nil, err
	}
	if ev.buildErr != nil {
		return nil, ev.buildErr
	}
	out := make(map[string]arr, len(ev.keys))
	for i, k := range ev.keys {
		var data []float64
		if res[i].DType() == dtypes.Float32 {
			d32, err := tensors.CopyFlatData[float32](res[i])
			if err != nil {
				return nil, fmt.Errorf("output %q: %w", k, err)
			}
			for _, v := range d32 {
				data = append(data, float64(v))
			}
		} else if data, err = tensors.CopyFlatData[float64](res[i]); err != nil {
			return nil, fmt.Errorf("output %q: %w", k, err)
		}
		out[k] = arr{data: data, dims: res[i].Shape().Dimensions}
	}
	return out, nil
}

// tolerance of the test-vector file: |got − want| <= abs + rel·|want|.
type tolerance struct{ Rel, Abs float64 }

func (tol tolerance) close(got, want float64) bool {
	return math.Abs(got-want) <= tol.Abs+tol.Rel*math.Abs(want)
}

// expectArr compares got with want element-wise (shapes must agree exactly).
func expectArr(t testing.TB, tol tolerance, label string, got, want arr) {
	t.Helper()
	if len(got.dims) != len(want.dims) {
		t.Errorf("%s: got shape %v, want %v", label, got.dims, want.dims)
		return
	}
	for i := range got.dims {
		if got.dims[i] != want.dims[i] {
			t.Errorf("%s: got shape %v, want %v", label, got.dims, want.dims)
			return
		}
	}
	bad := 0
	for i := range want.data {
		if g, w := got.data[i], want.data[i]; !tol.close(g, w) || math.IsNaN(g) {
			if bad < 3 {
				t.Errorf("%s[%d]: got %.9g, want %.9g (|diff| %.3g)", label, i, g, w, math.Abs(g-w))
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d elements differ in all", label, bad)
	}
}

// expectFinite fails if any element of the outputs is NaN or ±Inf.
func expectFinite(t testing.TB, label string, outs map[string]arr) {
	t.Helper()
	for k, a := range outs {
		for i, v := range a.data {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s: output %q[%d] = %v", label, k, i, v)
				break
			}
		}
	}
}
