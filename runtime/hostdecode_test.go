package runtime

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"stx.dev/stx/runtime/cpu"
)

// TestHostPrefillMatchesStepwise checks the batched prefill (all prompt positions of all rows
// in one step call) against feeding the prompt one position per call, the decode path: same
// cache contents and last-position logits, with ragged prompts so that left padding is
// exercised.
func TestHostPrefillMatchesStepwise(t *testing.T) {
	cfg := smallGQA()
	m, err := NewModel(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	lengths := []int{1, 13, 6, 16}
	prompts := randomSeqs(rand.New(rand.NewPCG(4, 4)), cfg.VocabSize, lengths...)
	rows, p, capacity := len(prompts), 16, 24
	kvh, hd := cfg.KVHeads, cfg.HeadDim()
	padCount := make([]int, rows)
	tokens, positions := make([]int32, rows*p), make([]int32, rows*p)
	for r, pr := range prompts {
		padCount[r] = p - len(pr)
		for i := range p {
			tokens[r*p+i] = int32(cfg.PAD)
			if i >= padCount[r] {
				tokens[r*p+i], positions[r*p+i] = pr[i-padCount[r]], int32(i-padCount[r])
			}
		}
	}
	run := func(stepwise bool) (k, v [][]float32, logits []float32) {
		d, err := newHostDecoder(m)
		if err != nil {
			t.Fatal(err)
		}
		k, v = make([][]float32, cfg.Layers), make([][]float32, cfg.Layers)
		for l := range k {
			k[l], v[l] = make([]float32, rows*kvh*capacity*hd), make([]float32, rows*kvh*capacity*hd)
		}
		logits = make([]float32, rows*cfg.VocabSize)
		if !stepwise {
			d.step(tokens, positions, k, v, capacity, padCount, 0, logits)
			return k, v, logits
		}
		colTok, colPos := make([]int32, rows), make([]int32, rows)
		for i := range p {
			for r := range rows {
				colTok[r], colPos[r] = tokens[r*p+i], positions[r*p+i]
			}
			d.step(colTok, colPos, k, v, capacity, padCount, i, logits)
		}
		return k, v, logits
	}
	k1, v1, l1 := run(false)
	k2, v2, l2 := run(true)
	worst := 0.0
	compare := func(what string, a, b []float32) {
		for i := range a {
			d := math.Abs(float64(a[i] - b[i]))
			worst = max(worst, d)
			if d > 1e-5+1e-5*math.Abs(float64(b[i])) {
				t.Fatalf("%s[%d]: batched prefill %v, stepwise %v", what, i, a[i], b[i])
			}
		}
	}
	for l := range k1 {
		compare("keys", k1[l], k2[l])
		compare("values", v1[l], v2[l])
	}
	compare("logits", l1, l2)
	t.Logf("max |batched − stepwise| = %.3g", worst)
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
	for _, rows := range []int{1, 5, 8} {
		const in, out = 37, 151
		d := &hostDecoder{workers: 2}
		x, w := randVec(rows*in), randVec(out*in)
		got := make([]float32, rows*out)
		d.goMatMul(got, w, x, rows, out, in)
		for r := range rows {
			for j := range out {
				var want float64
				for i := range in {
					want += float64(x[r*in+i]) * float64(w[j*in+i])
				}
				check("goMatMul", got[r*out+j], want)
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
	for b.Loop() {
		if _, err := s.Generate(prompts, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(prompts)*opt.MaxNewTokens*b.N)/b.Elapsed().Seconds(), "tok/s")
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
