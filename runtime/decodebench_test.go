package runtime

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// readBandwidth measures the machine's memory read bandwidth in bytes/s, STREAM-like: every
// core streams its share of a buffer much larger than the caches through one-row rowMatMul
// products (AVX loads, one multiply-add per value read: the loads are the limit), the best of
// several passes.
func readBandwidth(bytes int) float64 {
	const k = 4096
	n := bytes / 4 / k
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(i & 1023)
	}
	x, out := make([]float32, k), make([]float32, n)
	workers := runtime.GOMAXPROCS(0)
	best := 0.0
	for range 5 {
		start := time.Now()
		parallelFor(workers, n, func(_, lo, hi int) { rowMatMulSpan(out, n, w, x, 1, k, lo, hi, kernelBest) })
		best = max(best, float64(len(w)*4)/time.Since(start).Seconds())
	}
	return best
}

// decodeStepBytes is what one decode step of rows sequences with ctx cached positions each must
// read from memory at the least: every projection and the head once (as the decoder stores
// them), each row's embedding row, and each row's cached keys and values.
func decodeStepBytes(c Config, rows, ctx, weightBytes int) int {
	hd := c.HeadDim()
	perLayer := c.Hidden*(c.QDim()+2*c.KVHeads*hd) + c.QDim()*c.Hidden + 3*c.Hidden*c.Intermediate
	weights := (c.Layers*perLayer + c.VocabSize*c.Hidden) * weightBytes
	kv := rows * c.Layers * 2 * c.KVHeads * ctx * hd * 4
	return weights + kv + rows*c.Hidden*4
}

// BenchmarkDecodeStep times the host decoder's decode steps (temperature-1 sampling of each
// row included: the log-softmax over the vocabulary and the draw) at 1, 8 and 64 rows, 64
// cached positions each, and reports them against the memory bound: the step's bytes
// (decodeStepBytes) over the bandwidth readBandwidth measures. The model is $STX_DECODE_MODEL
// (a model directory or a built-in config; `stx init-model --shape qwen2.5-0.5b DIR` makes
// the 0.5B shape), else the built-in "bench"; with STX_DECODE_DTYPE=bfloat16 it computes in
// bfloat16 and the decoder reads bfloat16 weights.
func BenchmarkDecodeStep(b *testing.B) {
	spec := os.Getenv("STX_DECODE_MODEL")
	if spec == "" {
		spec = "bench"
	}
	m, err := OpenModel(spec, 1)
	if err != nil {
		b.Fatal(err)
	}
	weightBytes := 4
	if os.Getenv("STX_DECODE_DTYPE") == "bfloat16" {
		m.ComputeDType, weightBytes = dtypes.BFloat16, 2
	}
	s, err := NewSampler(testBackend(b), m)
	if err != nil {
		b.Fatal(err)
	}
	if !s.decodesOnHost() {
		b.Skip("the backend decodes in graphs")
	}
	if err := s.ensureHost(); err != nil {
		b.Fatal(err)
	}
	bw := readBandwidth(512 << 20)
	b.Logf("memory read bandwidth %.1f GB/s (%d cores)", bw/1e9, runtime.GOMAXPROCS(0))
	c := m.Config
	V := c.VocabSize
	const promptLen, ctx = 64, 64
	prompt := randomSeqs(rand.New(rand.NewPCG(1, 1)), V, promptLen)[0]
	first := newHostSeq(c, promptLen+1)
	logits := make([]float32, 64*V)
	s.prefillHost([]*hostSeq{first}, [][]int32{prompt}, [][]float32{logits[:V]})
	// A model computing in bfloat16 is timed with both kernels of its products, alternating:
	// the bfloat16 dot-product kernels (the default) and the float32-input ones (widenInputs).
	kernels := []string{""}
	if weightBytes == 2 {
		kernels = []string{"/f32in", "/bf16dot"}
	}
	for _, rows := range []int{1, 8, 64} {
		for _, kernel := range kernels {
			s.host.widenInputs = kernel == "/f32in"
			benchDecodeRows(b, s, fmt.Sprintf("rows=%d%s", rows, kernel), rows, promptLen, ctx, weightBytes, bw, first, logits)
		}
	}
}

// benchDecodeRows is one of BenchmarkDecodeStep's sub-benchmarks: decode steps of rows copies
// of the prefilled sequence first.
func benchDecodeRows(b *testing.B, s *Sampler, name string, rows, promptLen, ctx, weightBytes int, bw float64, first *hostSeq, logits []float32) {
	c := s.m.Config
	V := c.VocabSize
	b.Run(name, func(b *testing.B) {
		seqs := make([]*hostSeq, rows)
		scratch := make([]*sampleScratch, rows)
		tokens := make([]int32, rows)
		for r := range seqs {
			seqs[r] = newHostSeq(c, promptLen+1)
			seqs[r].copyPrefix(first, c.HeadDim(), promptLen)
			scratch[r] = newSampleScratch(V)
			copy(logits[r*V:(r+1)*V], logits[:V])
		}
		opt := SampleOptions{MaxNewTokens: 1, Temperature: 1}
		rng := rand.New(rand.NewPCG(2, 2))
		cpu0 := processCPUSeconds()
		for b.Loop() {
			parallelFor(s.host.workers, rows, func(_, lo, hi int) {
				for r := lo; r < hi; r++ {
					scratch[r].prepare(logits[r*V:(r+1)*V], opt)
				}
			})
			for r := range rows {
				tokens[r], _ = scratch[r].choose(opt, rng)
				seqs[r].n = promptLen // the same 64 cached positions at every step
			}
			s.host.step(seqs, nil, tokens, logits[:rows*V])
		}
		sec := b.Elapsed().Seconds() / float64(b.N)
		bytes := float64(decodeStepBytes(c, rows, ctx, weightBytes))
		b.ReportMetric(sec*1e3, "ms/step")
		b.ReportMetric((processCPUSeconds()-cpu0)/float64(b.N)*1e3, "cpu-ms/step")
		b.ReportMetric(float64(rows)/sec, "tok/s")
		b.ReportMetric(bytes/1e6, "MB/step")
		b.ReportMetric(bytes/sec/1e9, "GB/s")
		b.ReportMetric(100*bytes/bw/sec, "%bound")
		b.ReportMetric(bw/1e9, "bound-GB/s")
	})
}

// BenchmarkHostLoad times the host decoder updating its snapshot of the weights after a train
// step that changed every one of them (a full fine-tuning step), in place, and reports the bytes
// it read from the model's weights and wrote into the snapshot ($STX_DECODE_MODEL, else the
// built-in "bench"; STX_DECODE_DTYPE=bfloat16: a model computing in bfloat16; see
// BenchmarkDecodeStep).
func BenchmarkHostLoad(b *testing.B) {
	spec := os.Getenv("STX_DECODE_MODEL")
	if spec == "" {
		spec = "bench"
	}
	m, err := OpenModel(spec, 1)
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv("STX_DECODE_DTYPE") == "bfloat16" {
		m.ComputeDType = dtypes.BFloat16
	}
	d, err := newHostDecoder(m)
	if err != nil {
		b.Fatal(err)
	}
	cpu0 := processCPUSeconds()
	for b.Loop() {
		d.forget()
		if err := d.load(m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((processCPUSeconds()-cpu0)/float64(b.N)*1e3, "cpu-ms/op")
	b.ReportMetric(float64(d.loadedBytes)/1e6, "MB-read/op")
	b.ReportMetric(float64(d.storedBytes)/1e6, "MB-written/op")
}
