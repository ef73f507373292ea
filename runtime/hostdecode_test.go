package runtime

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"stx.dev/stx/runtime/cpu"
)

// TestHostPrefillMatchesStepwise checks the prefill (all positions of ragged prompts in one
// step call) against feeding each prompt alone one position per call, the decode path: the
// same cache contents and last-position logits, bit for bit (every product's rows are
// independent; see rowMatMul). Fed stepwise all together, rows leaving the batch as their
// prompts end, they give the same bits again.
func TestHostPrefillMatchesStepwise(t *testing.T) {
	cfg := smallGQA()
	m, err := NewModel(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	lengths := []int{1, 13, 6, 16}
	prompts := randomSeqs(rand.New(rand.NewPCG(4, 4)), cfg.VocabSize, lengths...)
	const capacity = 24
	d, err := newHostDecoder(m)
	if err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	// stepwise feeds the given rows one position per call, all rows with tokens left together.
	stepwise := func(rows []int) ([]*hostSeq, [][]float32) {
		seqs, logits := make([]*hostSeq, len(rows)), make([][]float32, len(rows))
		for i := range rows {
			seqs[i] = newHostSeq(cfg, capacity)
		}
		for pos := 0; ; pos++ {
			var in []*hostSeq
			var tok []int32
			var at []int
			for i, r := range rows {
				if pos < len(prompts[r]) {
					in, tok, at = append(in, seqs[i]), append(tok, prompts[r][pos]), append(at, i)
				}
			}
			if len(in) == 0 {
				return seqs, logits
			}
			out := make([]float32, len(in)*V)
			d.step(in, nil, tok, out)
			for j, i := range at {
				logits[i] = out[j*V : (j+1)*V]
			}
		}
	}
	together, lTogether := stepwise([]int{0, 1, 2, 3})
	pre := make([]*hostSeq, len(prompts))
	counts := make([]int, len(prompts))
	var tokens []int32
	for r, p := range prompts {
		pre[r], counts[r], tokens = newHostSeq(cfg, capacity), len(p), append(tokens, p...)
	}
	lPre := make([]float32, len(prompts)*V)
	d.step(pre, counts, tokens, lPre)
	for r, p := range prompts {
		alone, lAlone := stepwise([]int{r})
		for _, got := range []struct {
			how    string
			seq    *hostSeq
			logits []float32
		}{{"stepwise with the other rows", together[r], lTogether[r]}, {"prefilled with the other rows", pre[r], lPre[r*V : (r+1)*V]}} {
			if got.seq.n != len(p) {
				t.Fatalf("row %d %s: %d slots filled, want %d", r, got.how, got.seq.n, len(p))
			}
			for l := range cfg.Layers {
				if !slices.Equal(alone[0].k[l], got.seq.k[l]) || !slices.Equal(alone[0].v[l], got.seq.v[l]) {
					t.Fatalf("row %d layer %d: cache %s differs from stepwise alone", r, l, got.how)
				}
			}
			if !slices.Equal(lAlone[0], got.logits) {
				t.Fatalf("row %d: logits %s differ from stepwise alone", r, got.how)
			}
		}
	}
}

// TestHostKernels checks the decoder's loops against float64 references on lengths that leave
// remainders after the unrolled parts.
func TestHostKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	randVec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	check := func(what string, got float32, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-5+1e-5*math.Abs(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	for _, n := range []int{1, 3, 4, 7, 64, 97} {
		for _, outs := range []int{1, 3, 4, 9, 13} {
			const stride = 101
			rows, x := randVec(outs*stride), randVec(n)
			out := make([]float32, outs)
			scaledDots(out, rows, stride, x, 0.5)
			for j := range outs {
				var want float64
				for i := range n {
					want += float64(rows[j*stride+i]) * float64(x[i])
				}
				check("scaledDots", out[j], 0.5*want)
			}
			// weightedSum: n output columns, outs weighted rows.
			p, ws := randVec(outs), make([]float32, n)
			weightedSum(ws, rows, stride, p, 2)
			for i := range n {
				var want float64
				for j := range outs {
					want += float64(p[j]) * float64(rows[j*stride+i])
				}
				check("weightedSum", ws[i], 2*want)
			}
		}
	}
	worst := 0.0
	for x := float32(-110); x < 88.7; x += 0.0137 { // e^88.72 overflows float32
		want := math.Exp(float64(x))
		got := float64(cpu.Exp32(x))
		if rel := math.Abs(got-want) / want; want > 1e-37 && rel > worst {
			worst = rel
		}
		if x < -104 && got != 0 {
			t.Fatalf("cpu.Exp32(%v) = %v, want 0", x, got)
		}
	}
	// siluMul's four-lane exponential is expf32 operation for operation: bit-identical results,
	// also for groups of four that take the range-checked path (|x| > 87).
	g := randVec(203)
	for i := range g {
		g[i] *= 10
	}
	g[9], g[50], g[51] = -100, 95, -87.5
	u, a := randVec(len(g)), make([]float32, len(g))
	siluMul(a, g, u)
	for j := range g {
		if want := g[j] / (1 + cpu.Exp32(-g[j])) * u[j]; a[j] != want && !(math.IsNaN(float64(a[j])) && math.IsNaN(float64(want))) {
			t.Errorf("siluMul at %v: %v, want %v", g[j], a[j], want)
		}
	}
	if worst > 3e-7 { // about 2.5 float32 ulp
		t.Errorf("expf32: max relative error %.3g", worst)
	}
	t.Logf("expf32 max relative error %.3g", worst)
}

// BenchmarkHostSampling is the sampling part of `stx bench` on its own: the "bench" model,
// 8 prompts of 32 tokens, 128 new tokens each at temperature 1, on the test backend.
func BenchmarkHostSampling(b *testing.B) {
	be := testBackend(b)
	cfg, _ := BuiltinConfig("bench")
	m, err := NewModel(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSampler(be, m)
	if err != nil {
		b.Fatal(err)
	}
	prompts := randomSeqs(rand.New(rand.NewPCG(1, 1)), cfg.VocabSize, 32, 32, 32, 32, 32, 32, 32, 32)
	opt := SampleOptions{MaxNewTokens: 128, Temperature: 1, Seed: 1}
	if _, err := s.Generate(prompts, opt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := processCPUSeconds()
	for b.Loop() {
		if _, err := s.Generate(prompts, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(prompts)*opt.MaxNewTokens*b.N)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(len(prompts)*opt.MaxNewTokens*b.N)/(processCPUSeconds()-cpu0), "tok/cpu-s")
}

// BenchmarkAttendHeads runs a decode step's attention (8 rows, the "bench" model's heads, 96
// cached slots) on one goroutine: "hot" reuses one layer's cache, small enough to stay in cache;
// "cold" walks four layers' caches as a step does.
func BenchmarkAttendHeads(b *testing.B) {
	cfg, _ := BuiltinConfig("bench")
	d := &hostDecoder{c: cfg, workers: 1, scores: [][]float32{make([]float32, 160)}}
	const rows, capacity, cnt = 8, 160, 96
	kvh, hd := cfg.KVHeads, cfg.HeadDim()
	r := rand.New(rand.NewPCG(1, 1))
	for _, name := range []string{"hot", "cold"} {
		layers := 1
		if name == "cold" {
			layers = 4
		}
		kc := make([][]float32, layers)
		vc := make([][]float32, layers)
		for l := range layers {
			kc[l], vc[l] = make([]float32, rows*kvh*capacity*hd), make([]float32, rows*kvh*capacity*hd)
			for i := range kc[l] {
				kc[l][i], vc[l][i] = r.Float32(), r.Float32()
			}
		}
		q, out := make([]float32, hd), make([]float32, hd)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				for l := range 4 {
					for blk := range rows * kvh {
						k, v := kc[l%layers][blk*capacity*hd:(blk+1)*capacity*hd], vc[l%layers][blk*capacity*hd:(blk+1)*capacity*hd]
						d.attendHead(0, k, v, 0, cnt-1, q, out)
					}
				}
			}
			b.ReportMetric(4*rows*float64(kvh)*cnt*float64(hd)*4*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestHostAttentionKernel samples with the cpu package's attention kernel and with the Go
// loops: the kernel sums the query·key products in another order, so the log-probs agree to
// float32 rounding and the tokens drawn are the same.
func TestHostAttentionKernel(t *testing.T) {
	if !cpu.HasAttend {
		t.Skip("the C kernels are not compiled in")
	}
	b := testBackend(t)
	cfg := smallGQA()
	m, err := NewModel(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	prompts := randomSeqs(rand.New(rand.NewPCG(5, 5)), cfg.VocabSize, 3, 17, 9)
	var got [2][]Sample
	for i, goLoops := range []bool{false, true} {
		s, err := NewSampler(b, m)
		if err != nil {
			t.Fatal(err)
		}
		s.host = &hostDecoder{goAttention: goLoops}
		if got[i], err = s.Generate(prompts, SampleOptions{MaxNewTokens: 24, Temperature: 1, Seed: 4}); err != nil {
			t.Fatal(err)
		}
	}
	worst := 0.0
	for r := range prompts {
		if !slices.Equal(got[0][r].Tokens, got[1][r].Tokens) {
			t.Fatalf("row %d: kernel tokens %v, Go loops %v", r, got[0][r].Tokens, got[1][r].Tokens)
		}
		for j, lp := range got[0][r].LogProbs {
			want := got[1][r].LogProbs[j]
			d := math.Abs(float64(lp - want))
			worst = max(worst, d)
			if d > 1e-5*(1+math.Abs(float64(want))) {
				t.Fatalf("row %d token %d: kernel log-prob %v, Go loops %v", r, j, lp, want)
			}
		}
	}
	t.Logf("max |kernel − Go loops| log-prob = %.3g", worst)
}

// BenchmarkGRPOSampling samples as a GRPO rollout does: 2 prompts of 32 tokens, each repeated
// for a group of 8, at most 128 new tokens at temperature 1, with 32 stop tokens so that rows
// end at different lengths (about 60 tokens on average on the random "bench" model).
// Generated tokens/s.
func BenchmarkGRPOSampling(b *testing.B) {
	be := testBackend(b)
	cfg, _ := BuiltinConfig("bench")
	m, err := NewModel(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSampler(be, m)
	if err != nil {
		b.Fatal(err)
	}
	distinct := randomSeqs(rand.New(rand.NewPCG(1, 1)), cfg.VocabSize, 32, 32)
	var prompts [][]int32
	for _, p := range distinct {
		for range 8 {
			prompts = append(prompts, p)
		}
	}
	opt := SampleOptions{MaxNewTokens: 128, Temperature: 1, Seed: 1}
	for i := range 32 {
		opt.StopTokens = append(opt.StopTokens, int32(i))
	}
	generated := 0
	cpu0 := processCPUSeconds()
	for b.Loop() {
		out, err := s.Generate(prompts, opt)
		if err != nil {
			b.Fatal(err)
		}
		for _, smp := range out {
			generated += len(smp.Tokens)
		}
	}
	b.ReportMetric(float64(generated)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(generated)/(processCPUSeconds()-cpu0), "tok/cpu-s")
	b.ReportMetric(float64(generated)/float64(b.N*len(prompts)), "tokens/row")
}

// bf16HostSampler is a sampler of m computing in bfloat16, decoding on the host; the test is
// skipped on a backend that decodes such a model in graphs (SimpleGo).
func bf16HostSampler(t *testing.T, m *Model) *Sampler {
	t.Helper()
	m.ComputeDType = dtypes.BFloat16
	s, err := NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	if !s.decodesOnHost() {
		t.Skip("the backend decodes a bfloat16 model in graphs")
	}
	return s
}

// TestHostBF16WeightsSameBits: for a model computing in bfloat16 the decoder reads its
// projections and head as bfloat16 values (hostLayerBF16) with the bfloat16 dot-product
// kernels, whose samples are the same bits with the instruction and with its emulation (so on
// every CPU); with the float32-input kernels (widenInputs) the samples are those of float32
// copies of the same values, bit for bit.
func TestHostBF16WeightsSameBits(t *testing.T) {
	cfg, _ := BuiltinConfig("bench")
	cfg.InitStd = 0.05
	m, err := NewModel(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	s := bf16HostSampler(t, m)
	prompts := randomSeqs(rand.New(rand.NewPCG(6, 6)), cfg.VocabSize, 9, 3, 9)
	opt := SampleOptions{MaxNewTokens: 16, Temperature: 1, Seed: 5}
	dot, err := s.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	bf16DotKernel = kernelScalar
	emulated, err := s.Generate(prompts, opt)
	bf16DotKernel = kernelBest
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dot, emulated) {
		t.Fatalf("bfloat16 dot products (%d kernels): %v, emulated: %v", bf16DotLevels, dot, emulated)
	}
	s.host.widenInputs = true
	packed, err := s.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	if s.host.layersBF16 == nil || s.host.headBF16 == nil {
		t.Fatal("the decoder of a bfloat16 model did not pack its weights")
	}
	s.host.widenBF16() // float32 copies of the same values from now on
	wide, err := s.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(packed, wide) {
		t.Fatalf("bfloat16 weights: %v, their float32 copies: %v", packed, wide)
	}
}

// widenBF16 replaces the decoder's bfloat16 projections and head by float32 copies of their
// values (which it then reads as it does a float32 model's).
func (d *hostDecoder) widenBF16() {
	widen := func(b []uint16) []float32 {
		w := make([]float32, len(b))
		for i, v := range b {
			w[i] = math.Float32frombits(uint32(v) << 16)
		}
		return w
	}
	for l := range d.layers {
		ly, lb := &d.layers[l], d.layersBF16[l]
		ly.qkv, ly.o, ly.gateUp, ly.down = widen(lb.qkv), widen(lb.o), widen(lb.gateUp), widen(lb.down)
	}
	d.head = widen(d.headBF16)
	d.layersBF16, d.headBF16 = nil, nil
}
