package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Benchmarks of the Llama-style train-step shapes. GB/s counts bytes read plus bytes written.

func reportGBs(b *testing.B, bytes int) {
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

func BenchmarkTransposeHeads(b *testing.B) {
	// [batch, seq, heads, headDim] → [batch, heads, seq, headDim].
	dims := []int{8, 256, 4, 64}
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), product(dims))
	dst := make([]float32, len(src))
	b.ReportAllocs()
	for b.Loop() {
		Transpose(dst, src, dims, []int{0, 2, 1, 3})
	}
	reportGBs(b, 8*len(src))
}

func BenchmarkTranspose2D(b *testing.B) {
	dims := []int{2048, 2048}
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), product(dims))
	dst := make([]float32, len(src))
	b.ReportAllocs()
	for b.Loop() {
		Transpose(dst, src, dims, []int{1, 0})
	}
	reportGBs(b, 8*len(src))
}

func benchReduce(b *testing.B, dims, axes []int, outN int) {
	benchReduceOp(b, dims, axes, outN, ReduceSum)
}

func benchReduceOp(b *testing.B, dims, axes []int, outN int, op ReduceOp) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), product(dims))
	dst := make([]float32, outN)
	b.ReportAllocs()
	for b.Loop() {
		Reduce(dst, src, dims, axes, op)
	}
	reportGBs(b, 4*(len(src)+len(dst)))
}

func BenchmarkReduceSumLastAxis(b *testing.B)  { benchReduce(b, []int{2048, 2048}, []int{1}, 2048) }
func BenchmarkReduceSumFirstAxis(b *testing.B) { benchReduce(b, []int{2048, 2048}, []int{0}, 2048) }
func BenchmarkReduceSumMiddleAxis(b *testing.B) {
	benchReduce(b, []int{8, 256, 256}, []int{1}, 8*256)
}

// The attention softmax's max over keys ([B, heads, T, T] over the last axis).
func BenchmarkReduceMaxLastAxis(b *testing.B) {
	benchReduceOp(b, []int{8 * 4 * 256, 256}, []int{1}, 8*4*256, ReduceMax)
}
func BenchmarkTinyReduceSum(b *testing.B) { benchReduce(b, []int{8, 16}, []int{1}, 8) }

func benchBroadcast(b *testing.B, axis int) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), 2048)
	dst := make([]float32, 2048*2048)
	b.ReportAllocs()
	for b.Loop() {
		BroadcastInDim(dst, src, []int{2048}, []int{2048, 2048}, []int{axis})
	}
	reportGBs(b, 4*(len(src)+len(dst)))
}

func BenchmarkBroadcastRows(b *testing.B)    { benchBroadcast(b, 1) } // src along the last axis: copy per row
func BenchmarkBroadcastColumns(b *testing.B) { benchBroadcast(b, 0) } // src along axis 0: fill per row

func embeddingInputs() (table []float32, indices []int32) {
	rng := rand.New(rand.NewPCG(1, 1))
	table = randFloat32(rng, 2048*256)
	indices = make([]int32, 2048)
	for i := range indices {
		indices[i] = int32(rng.IntN(2048))
	}
	return table, indices
}

func BenchmarkGatherRows(b *testing.B) {
	table, indices := embeddingInputs()
	dst := make([]float32, 2048*256)
	b.ReportAllocs()
	for b.Loop() {
		Gather(dst, table, []int{2048, 256}, indices, []int{2048, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 256}, []int{2048, 256})
	}
	reportGBs(b, 4*(2*len(dst)+len(indices)))
}

func BenchmarkScatterSumRows(b *testing.B) {
	table, indices := embeddingInputs()
	updates := randFloat32(rand.New(rand.NewPCG(2, 2)), 2048*256)
	b.ReportAllocs()
	for b.Loop() {
		ScatterSum(table, []int{2048, 256}, indices, []int{2048, 1}, updates, []int{2048, 256}, 1, []int{1}, []int{0}, []int{0})
	}
	// Each update row reads and writes an operand row and reads an update row.
	reportGBs(b, 4*(3*len(updates)+len(indices)))
}

// SimpleGo executing the same backend ops, for a ratio ("go:ops_sequential", one op per graph;
// the figure includes SimpleGo's per-execution overhead, which is small at these sizes).

func benchSimpleGo(b *testing.B, params []param, bytes int, build func(bl backends.Builder, ps []backends.Op) (backends.Op, error)) {
	be, err := simpleGo()
	if err != nil {
		b.Fatal(err)
	}
	bl := be.Builder(b.Name())
	ops := make([]backends.Op, len(params))
	for i, p := range params {
		if ops[i], err = bl.Parameter(fmt.Sprintf("p%d", i), shapes.Make(p.dtype, p.dims...), nil); err != nil {
			b.Fatal(err)
		}
	}
	o, err := build(bl, ops)
	if err != nil {
		b.Fatal(err)
	}
	exe, err := bl.Compile([]backends.Op{o}, nil)
	if err != nil {
		b.Fatal(err)
	}
	bufs := make([]backends.Buffer, len(params))
	for i, p := range params {
		if bufs[i], err = be.BufferFromFlatData(0, p.flat, shapes.Make(p.dtype, p.dims...)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		outs, err := exe.Execute(bufs, nil, 0)
		if err != nil {
			b.Fatal(err)
		}
		_ = be.BufferFinalize(outs[0])
	}
	reportGBs(b, bytes)
}

func BenchmarkSimpleGoTransposeHeads(b *testing.B) {
	dims := []int{8, 256, 4, 64}
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), product(dims))
	benchSimpleGo(b, []param{{src, dtypes.Float32, dims}}, 8*len(src), func(bl backends.Builder, ps []backends.Op) (backends.Op, error) {
		return bl.Transpose(ps[0], 0, 2, 1, 3)
	})
}

func BenchmarkSimpleGoReduceSumLastAxis(b *testing.B) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), 2048*2048)
	benchSimpleGo(b, []param{{src, dtypes.Float32, []int{2048, 2048}}}, 4*(len(src)+2048), func(bl backends.Builder, ps []backends.Op) (backends.Op, error) {
		return bl.ReduceSum(ps[0], 1)
	})
}

func BenchmarkSimpleGoReduceSumFirstAxis(b *testing.B) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), 2048*2048)
	benchSimpleGo(b, []param{{src, dtypes.Float32, []int{2048, 2048}}}, 4*(len(src)+2048), func(bl backends.Builder, ps []backends.Op) (backends.Op, error) {
		return bl.ReduceSum(ps[0], 0)
	})
}

func BenchmarkSimpleGoGatherRows(b *testing.B) {
	table, indices := embeddingInputs()
	benchSimpleGo(b, []param{{table, dtypes.Float32, []int{2048, 256}}, {indices, dtypes.Int32, []int{2048, 1}}}, 4*(2*len(table)+len(indices)),
		func(bl backends.Builder, ps []backends.Op) (backends.Op, error) {
			return bl.Gather(ps[0], ps[1], 1, []int{1}, []int{0}, []int{0}, []int{1, 256}, false)
		})
}

func BenchmarkSimpleGoScatterSumRows(b *testing.B) {
	table, indices := embeddingInputs()
	updates := randFloat32(rand.New(rand.NewPCG(2, 2)), 2048*256)
	benchSimpleGo(b, []param{{table, dtypes.Float32, []int{2048, 256}}, {indices, dtypes.Int32, []int{2048, 1}}, {updates, dtypes.Float32, []int{2048, 256}}},
		4*(3*len(updates)+len(indices)), func(bl backends.Builder, ps []backends.Op) (backends.Op, error) {
			return bl.ScatterSum(ps[0], ps[1], ps[2], 1, []int{1}, []int{0}, []int{0}, false, false)
		})
}

// Tiny ops, as the sampler's graphs run them: the per-call overhead (and allocations) matter.

func BenchmarkTinyTranspose(b *testing.B) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), 2*4*8)
	dst := make([]float32, len(src))
	b.ReportAllocs()
	for b.Loop() {
		Transpose(dst, src, []int{2, 4, 8}, []int{0, 2, 1})
	}
}

func BenchmarkTinyGather(b *testing.B) {
	table := randFloat32(rand.New(rand.NewPCG(1, 1)), 64*16)
	indices := []int32{3, 60, 7, 0, 12, 1, 9, 33}
	dst := make([]float32, 8*16)
	b.ReportAllocs()
	for b.Loop() {
		Gather(dst, table, []int{64, 16}, indices, []int{8, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 16}, []int{8, 16})
	}
}

func BenchmarkTinyBroadcast(b *testing.B) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), 16)
	dst := make([]float32, 8*16)
	b.ReportAllocs()
	for b.Loop() {
		BroadcastInDim(dst, src, []int{16}, []int{8, 16}, []int{1})
	}
}

func BenchmarkTinyArgMax(b *testing.B) {
	src := randFloat32(rand.New(rand.NewPCG(1, 1)), 8*64)
	dst := make([]int32, 8)
	b.ReportAllocs()
	for b.Loop() {
		ArgMinMax(dst, src, []int{8, 64}, 1, false)
	}
}

// RoPE's backward pass: the rotation pairs' gradients summed over their size-2 axis.
func BenchmarkReduceSumPairAxis(b *testing.B) {
	benchReduce(b, []int{8, 256, 4, 2, 32}, []int{3}, 8*256*4*32)
}

// A scalar broadcast to 4M elements: the zeros a scatter starts from (the log-probs' gather's
// gradient).
func BenchmarkBroadcastScalar(b *testing.B) {
	src := []float32{0}
	dst := make([]float32, 2048*2048)
	b.ReportAllocs()
	for b.Loop() {
		BroadcastInDim(dst, src, nil, []int{2048 * 2048, 1}, nil)
	}
	reportGBs(b, 4*len(dst))
}
