package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/cpu"
	"stx.dev/stx/runtime/safetensors"
)

// checkRoundedProduct checks got [m, n] against the float64 product of a [m, k] and b (both
// already rounded): every element must be a bfloat16 value between the roundings of
// sum ± 2k·2⁻²⁴·Σ|products| (the float32 accumulation's error bound). bT says b is [n, k].
func checkRoundedProduct(t *testing.T, what string, round func(float32) float32, got, a, b []float32, m, n, k int, bT bool) {
	t.Helper()
	for i := range m {
		for j := range n {
			var s, mag float64
			for p := range k {
				bv := b[p*n+j]
				if bT {
					bv = b[j*k+p]
				}
				s += float64(a[i*k+p]) * float64(bv)
				mag += math.Abs(float64(a[i*k+p]) * float64(bv))
			}
			e := 2 * float64(k) * 0x1p-24 * mag
			lo, hi := round(float32(s-e)), round(float32(s+e))
			g := got[i*n+j]
			if !(g >= lo && g <= hi) || math.Float32bits(g)&0xffff != 0 {
				t.Fatalf("%s[%d,%d] = %v, want the bfloat16 rounding of %v ± %.3g: [%v, %v]", what, i, j, g, s, e, lo, hi)
			}
		}
	}
}

// TestBF16LinearMatchesRoundedFloat64: LinearIn(BFloat16) is "round both operands to bfloat16,
// multiply exactly, round the result to bfloat16" up to the float32 accumulation, and so are
// its two gradient products (the adjoint rounded to bfloat16 on its way in, each product
// rounded, the gradients float32); the result differs from the float32 Linear's.
func TestBF16LinearMatchesRoundedFloat64(t *testing.T) {
	b := testBackend(t)
	if isSimpleGo(b) {
		t.Skip("SimpleGo's bfloat16 is its own: its conversions truncate, and its products are not the truncation of their float32 sums either")
	}
	round := func(f float32) float32 { return cpu.RoundBF16(f).Float32() }
	rng := rand.New(rand.NewPCG(3, 5))
	const rows, in, out = 12, 96, 40
	rand32 := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	x, w, v := rand32(rows*in), rand32(out*in), rand32(rows*out)
	exec, err := NewExecAny(b, func(x, w, v *Node) []*Node {
		y := LinearIn(dtypes.BFloat16, x, w)
		grads := Gradient(ReduceAllSum(Mul(y, v)), x, w)
		return []*Node{y, grads[0], grads[1], Linear(x, w)}
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := exec.Exec(tensors.FromFlatDataAndDimensions(x, rows, in), tensors.FromFlatDataAndDimensions(w, out, in),
		tensors.FromFlatDataAndDimensions(v, rows, out))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.DType() != dtypes.Float32 {
			t.Fatalf("output %d is %s, want float32", i, r.DType())
		}
	}
	roundAll := func(s []float32) []float32 {
		out := make([]float32, len(s))
		for i, f := range s {
			out[i] = round(f)
		}
		return out
	}
	xr, wr, vr := roundAll(x), roundAll(w), roundAll(v)
	y := tensors.MustCopyFlatData[float32](res[0])
	checkRoundedProduct(t, "y", round, y, xr, wr, rows, out, in, true)
	// dX = v·W [rows, in]; dW = vᵀ·X [out, in].
	checkRoundedProduct(t, "dX", round, tensors.MustCopyFlatData[float32](res[1]), vr, wr, rows, in, out, false)
	vT := make([]float32, out*rows)
	for i := range rows {
		for j := range out {
			vT[j*rows+i] = vr[i*out+j]
		}
	}
	checkRoundedProduct(t, "dW", round, tensors.MustCopyFlatData[float32](res[2]), vT, xr, out, in, rows, false)
	y32 := tensors.MustCopyFlatData[float32](res[3])
	differ := 0
	for i := range y {
		if y[i] != y32[i] {
			differ++
		}
	}
	if differ < len(y)/2 {
		t.Errorf("only %d of %d outputs differ from the float32 product: is the product computed in bfloat16?", differ, len(y))
	}
}

// bf16Stats are the largest differences of a bfloat16 model's results from the float32 ones.
type bf16Stats struct {
	logProb, loss, grad float64 // |Δ|/max(1,|f32|) of log-probs and loss; per-tensor ‖Δ‖/‖f32‖ of gradients
	lpDiffer, lpTotal   int     // log-probs that differ at all
}

// bf16VsFloat32 scores seqs and computes the SFT loss and gradients of a batch with two copies
// of cfg's model (seed), one computing in float32 and one in bfloat16, on b.
func bf16VsFloat32(t *testing.T, b *Backend, cfg Config, seed uint64) bf16Stats {
	t.Helper()
	models := func(dt dtypes.DType) *Model {
		m, err := NewModel(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		m.ComputeDType = dt
		return m
	}
	seqs := randomSeqs(rand.New(rand.NewPCG(1, 2)), cfg.VocabSize, 40, 17, 33)
	lp32, lp16 := scoreOn(t, b, models(dtypes.Float32), seqs), scoreOn(t, b, models(dtypes.BFloat16), seqs)
	var st bf16Stats
	st.lpTotal = len(lp32)
	for i := range lp32 {
		st.logProb = max(st.logProb, parityDiff(lp16[i], lp32[i]))
		if lp16[i] != lp32[i] {
			st.lpDiffer++
		}
		if math.IsNaN(float64(lp16[i])) {
			t.Fatalf("log-prob %d is NaN", i)
		}
	}
	batch := func() map[string]*tensors.Tensor { return sftBatch(rand.New(rand.NewPCG(7, 8)), cfg, 3, 16) }
	loss32, g32 := lossAndGradients(t, b, models(dtypes.Float32), batch())
	loss16, g16 := lossAndGradients(t, b, models(dtypes.BFloat16), batch())
	st.loss = parityDiff(loss16, loss32)
	for name, g := range g32 {
		var num, den float64
		for j := range g {
			d := float64(g16[name][j] - g[j])
			num += d * d
			den += float64(g[j]) * float64(g[j])
		}
		if den > 0 {
			st.grad = max(st.grad, math.Sqrt(num/den))
		}
	}
	return st
}

// TestBF16ParityWithFloat32: a model computing in bfloat16 gives the float32 model's log-probs,
// SFT loss and gradients to bfloat16's precision, and differs from it (the knob acts). Measured
// (|Δ|/max(1,|f32|); gradients: the worst tensor's ‖Δ‖/‖f32‖) on the cpu backend: tiny
// log-probs 1.6e-3, loss 4e-5, gradients 1.4e-2; bench log-probs 5.3e-3, loss 4e-5, gradients
// 2.5e-2; on SimpleGo, whose conversions truncate: log-probs 3.3e-3 and 6.7e-3, loss 2.6e-4
// and 6.7e-4, gradients 4.5e-2 and 5.7e-2. The bounds are about twice those.
func TestBF16ParityWithFloat32(t *testing.T) {
	b := testBackend(t)
	bounds := [3]float64{1e-2, 1e-3, 5e-2} // log-prob, loss, gradient
	if isSimpleGo(b) {
		bounds = [3]float64{2e-2, 2e-3, 1.2e-1}
	}
	for _, name := range []string{"tiny", "bench"} {
		t.Run(name, func(t *testing.T) {
			cfg, _ := BuiltinConfig(name)
			cfg.InitStd = 0.05 // non-trivial attention and MLP
			st := bf16VsFloat32(t, b, cfg, 7)
			t.Logf("bf16 vs f32: log-probs %.3g (%d of %d differ), loss %.3g, gradients %.3g", st.logProb, st.lpDiffer, st.lpTotal, st.loss, st.grad)
			for _, c := range []struct {
				what       string
				got, bound float64
			}{{"log-prob", st.logProb, bounds[0]}, {"loss", st.loss, bounds[1]}, {"gradient", st.grad, bounds[2]}} {
				if !(c.got <= c.bound) {
					t.Errorf("%s: bf16 differs from f32 by %.3g, more than %.3g", c.what, c.got, c.bound)
				}
			}
			if st.lpDiffer < st.lpTotal/2 || st.logProb < 1e-5 || st.grad < 1e-4 {
				t.Errorf("bf16 is too close to f32 (log-probs %.3g, %d of %d differ; gradients %.3g): is the knob acting?",
					st.logProb, st.lpDiffer, st.lpTotal, st.grad)
			}
		})
	}
}

// TestBF16SamplerMatchesForward: the sampler of a bfloat16 model computes what its training
// graph computes, on the host decoder and in decode graphs: the log-probs it reports are closer
// to the bfloat16 full forward's than to the float32 forward's. Not equal: a bfloat16 product
// rounds a float32 sum whose order depends on the shapes (rows per product, padded lengths), and
// a sum within that order's float32 error of a rounding boundary rounds one way or the other,
// a change of 2⁻⁸ in that element. That is bfloat16's training/inference mismatch, small with
// few such flips (narrow layers) and larger with more. Measured on the cpu backend, sampler
// against bf16 forward vs against f32 forward: smallGQA with q/k norms, max 7.2e-4 vs 5.4e-2
// (host) and 4.8e-7 vs 5.4e-2 (graphs); bench, mean 3.2e-3 vs 8.1e-3 (host) and 2.4e-3 vs
// 7.8e-3 (graphs), where float32 gives about 1e-6.
func TestBF16SamplerMatchesForward(t *testing.T) {
	b := testBackend(t)
	qk := smallGQA()
	qk.Architecture, qk.QKNorm = ArchQwen3, true // the norms the host decoder applies between bfloat16 products
	bench, _ := BuiltinConfig("bench")
	bench.InitStd = 0.05
	for _, tc := range []struct {
		name string
		cfg  Config
		// useMax compares the largest differences (few flips: the bf16 forward within 2e-3 and
		// 4× closer than the f32 one), else the mean ones (the bf16 forward 2× closer).
		useMax bool
	}{{"qk-norm", qk, true}, {"bench", bench, false}} {
		for _, hostDecode := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/host-decode-%v", tc.name, hostDecode), func(t *testing.T) {
				m, err := NewModel(tc.cfg, 21)
				if err != nil {
					t.Fatal(err)
				}
				m.ComputeDType = dtypes.BFloat16
				s, err := NewSampler(b, m)
				if err != nil {
					t.Fatal(err)
				}
				if hostDecode && !s.hostDecode {
					t.Skipf("the sampler of backend %s decodes in graphs", b.Name())
				}
				s.hostDecode = hostDecode
				prompts := randomSeqs(rand.New(rand.NewPCG(1, 1)), tc.cfg.VocabSize, 5, 12, 1, 30)
				samples, err := s.Generate(prompts, SampleOptions{MaxNewTokens: 20, Temperature: 1, Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				var full [][]int32
				for i, p := range prompts {
					full = append(full, append(append([]int32{}, p...), samples[i].Tokens...))
				}
				// The sampled tokens' log-probs under the full forward in dt: worst and mean
				// |sampler − forward|.
				diffs := func(dt dtypes.DType) (worst, mean float64) {
					m.ComputeDType = dt
					defer func() { m.ComputeDType = dtypes.BFloat16 }()
					sc, err := NewScorer(b, m)
					if err != nil {
						t.Fatal(err)
					}
					scored, err := sc.Score(full)
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for i, p := range prompts {
						for j, lp := range samples[i].LogProbs {
							d := math.Abs(float64(lp - scored[i].LogProbs[len(p)-1+j]))
							worst, mean, n = max(worst, d), mean+d, n+1
						}
					}
					return worst, mean / float64(n)
				}
				worst16, mean16 := diffs(dtypes.BFloat16)
				worst32, mean32 := diffs(dtypes.Float32)
				t.Logf("|sampler − bf16 forward| max %.3g mean %.3g; |sampler − f32 forward| max %.3g mean %.3g",
					worst16, mean16, worst32, mean32)
				if tc.useMax && (!(worst16 <= 2e-3) || !(worst16*4 <= worst32)) ||
					!tc.useMax && !(mean16*2 <= mean32) {
					t.Errorf("the bf16 sampler is not closer to the bf16 forward than to the f32 one: it should compute the former")
				}
			})
		}
	}
}

// TestBF16TrainingKeepsFloat32State: a model computing in bfloat16 trains (finite losses that
// differ from the float32 model's), deterministically (same seed, same bits), its weights and
// AdamW's moments stay float32 in memory and in the checkpoint, and the host decoder takes the
// rounded weights again when the compute dtype changes.
func TestBF16TrainingKeepsFloat32State(t *testing.T) {
	b := testBackend(t)
	cfg, _ := BuiltinConfig("tiny")
	cfg.InitStd = 0.05
	batch := sftBatch(rand.New(rand.NewPCG(8, 8)), cfg, 4, 32)
	train := func(dt dtypes.DType) (*Model, *Trainer, []float64) {
		m, err := NewModel(cfg, 4)
		if err != nil {
			t.Fatal(err)
		}
		m.ComputeDType = dt
		tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{BaseLR: 1e-3}})
		if err != nil {
			t.Fatal(err)
		}
		var losses []float64
		for range 3 {
			res, err := tr.Step(batch1(batch))
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) || res.Skipped {
				t.Fatalf("step %d: loss %v, skipped %v", res.Step, res.Loss, res.Skipped)
			}
			losses = append(losses, res.Loss)
		}
		return m, tr, losses
	}
	m1, tr1, l1 := train(dtypes.BFloat16)
	m2, _, l2 := train(dtypes.BFloat16)
	_, _, l32 := train(dtypes.Float32)
	t.Logf("losses: bf16 %v, f32 %v", l1, l32)
	for i := range l1 {
		if l1[i] != l2[i] {
			t.Fatalf("step %d: losses %v and %v of two identical bf16 runs", i, l1[i], l2[i])
		}
	}
	for _, p := range m1.Params() {
		a, _ := m1.ParamValues(p.Name)
		c, _ := m2.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s differs between two identical bf16 runs", p.Name)
		}
	}
	if l1[len(l1)-1] == l32[len(l32)-1] {
		t.Errorf("bf16 and f32 training gave the same loss %v", l1[len(l1)-1])
	}
	// Every variable of the context — weights and optimizer state — is float32.
	optimizerVars := 0
	m1.Context().EnumerateVariables(func(v *context.Variable) {
		if strings.Contains(v.Scope(), optimizerScope) {
			optimizerVars++
		}
		if dt := v.Shape().DType; dt != dtypes.Float32 && dt != dtypes.Int64 && dt != dtypes.Int32 {
			t.Errorf("variable %s/%s is %s", v.Scope(), v.Name(), dt)
		}
		if v.Shape().DType != dtypes.Float32 && strings.Contains(v.Scope(), optimizerScope) && v.Shape().Rank() > 0 {
			t.Errorf("optimizer state %s/%s is %s", v.Scope(), v.Name(), v.Shape().DType)
		}
	})
	if optimizerVars == 0 {
		t.Fatal("no optimizer state found")
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tr1.SaveCheckpoint(dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".", optimizerFile} {
		var saved map[string]safetensors.Tensor
		var err error
		if f == "." {
			saved, err = safetensors.ReadDir(dir)
		} else {
			var file *safetensors.File
			if file, err = safetensors.ReadFile(filepath.Join(dir, f)); err == nil {
				saved = file.Tensors
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(saved) == 0 {
			t.Fatalf("%s: no tensors", f)
		}
		for name, x := range saved {
			if x.DType != safetensors.F32 {
				t.Errorf("%s: %s saved as %s", f, name, x.DType)
			}
		}
	}

	// The host decoder's snapshot follows the compute dtype.
	d, err := newHostDecoder(m1)
	if err != nil {
		t.Fatal(err)
	}
	if !d.bf16 || !d.current(m1) {
		t.Fatalf("host decoder of a bf16 model: bf16 %v, current %v", d.bf16, d.current(m1))
	}
	m1.ComputeDType = dtypes.Float32
	if d.current(m1) {
		t.Error("the host decoder's bf16 snapshot is current for a float32 model")
	}
}

// TestXLAMatchesCPUInBF16: models computing in bfloat16 give the same log-probs, SFT loss and
// gradients on the xla backend (each installed XLA CPU plugin, excess precision off) as on the
// cpu backend. Both round every product to bfloat16; their float32 sums differ in order only,
// but a sum that lands within that difference of a bfloat16 rounding boundary rounds one way
// on one backend and the other way on the other (a relative change of 2⁻⁸ in that element), so
// the bounds allow a few such flips rather than float32's parityTolerance. Measured
// (|Δ|/max(1,|cpu|); gradients: the worst tensor's ‖Δ‖/‖cpu‖) on both plugins: log-probs
// ≤ 2.1e-7, loss 0, gradients ≤ 1.4e-6 (no flip on these models), against bf16-vs-f32
// differences of about 1e-3 and 1e-2.
func TestXLAMatchesCPUInBF16(t *testing.T) {
	forEachXLAPlugin(t, func(t *testing.T, xla, cpu *Backend) {
		for _, pm := range parityModels() {
			t.Run(pm.name, func(t *testing.T) {
				mx, mc := pm.new(t), pm.new(t)
				mx.ComputeDType, mc.ComputeDType = dtypes.BFloat16, dtypes.BFloat16
				cfg := mx.Config
				seqs := randomSeqs(rand.New(rand.NewPCG(5, 6)), cfg.VocabSize, 17, 5, 11)
				lpX, lpC := scoreOn(t, xla, mx, seqs), scoreOn(t, cpu, mc, seqs)
				lpWorst := 0.0
				for i := range lpC {
					lpWorst = max(lpWorst, parityDiff(lpX[i], lpC[i]))
				}
				batch := func() map[string]*tensors.Tensor { return sftBatch(rand.New(rand.NewPCG(7, 8)), cfg, 3, 16) }
				lossX, gradX := lossAndGradients(t, xla, mx, batch())
				lossC, gradC := lossAndGradients(t, cpu, mc, batch())
				lossDiff := parityDiff(lossX, lossC)
				gradWorst := 0.0
				for name, g := range gradC {
					var num, den float64
					for j := range g {
						d := float64(gradX[name][j] - g[j])
						num += d * d
						den += float64(g[j]) * float64(g[j])
					}
					if den > 0 {
						gradWorst = max(gradWorst, math.Sqrt(num/den))
					}
				}
				t.Logf("bf16, max |xla − cpu|: log-probs %.3g, loss %.3g, gradients %.3g", lpWorst, lossDiff, gradWorst)
				for _, c := range []struct {
					what       string
					got, bound float64
				}{{"log-prob", lpWorst, 1e-3}, {"loss", lossDiff, 1e-4}, {"gradient", gradWorst, 1e-2}} {
					if !(c.got <= c.bound) {
						t.Errorf("%s: xla and cpu differ by %.3g in bf16, more than %.3g", c.what, c.got, c.bound)
					}
				}
			})
		}
	})
}
