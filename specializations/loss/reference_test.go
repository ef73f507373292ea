package loss

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// tight is the tolerance for float64 graph results against float64 host references.
var tight = tolerance{Rel: 1e-10, Abs: 1e-12}

// softmaxRef is softmax(z/τ) in float64, max-shifted.
func softmaxRef(z []float64, tau float64) []float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, v/tau)
	}
	out := make([]float64, len(z))
	sum := 0.0
	for i, v := range z {
		out[i] = math.Exp(v/tau - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func klRef(p, q []float64) float64 {
	d := 0.0
	for i := range p {
		if p[i] > 0 {
			d += p[i] * math.Log(p[i]/q[i])
		}
	}
	return d
}

// TestGeneralizedJSDReference checks GKD (Agarwal et al., 2024) against a direct float64
// evaluation of the definitions (M formed from probabilities, not log-space).
func TestGeneralizedJSDReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const b, tt, v = 2, 3, 5
	student, teacher := randomArr(rng, -4, 4, b, tt, v), randomArr(rng, -4, 4, b, tt, v)
	mask := matrix([][]float64{{1, 0, 1}, {1, 1, 0}})
	for _, beta := range []float64{0, 0.1, 0.5, 0.9, 1} {
		const tau = 0.8
		out := runGraph(t, []arr{student, teacher, mask}, func(in []*Node) (graphOutputs, error) {
			res, err := GeneralizedJSD(in[0], in[1], in[2], GKDConfig{Beta: beta, Temperature: tau}, Reducer{})
			if err != nil {
				return nil, err
			}
			return graphOutputs{"loss": res.Loss, "d": res.Aux["token_loss"],
				"teacher_grad": Gradient(res.Loss, in[1])[0]}, nil
		})
		sum, n := 0.0, 0
		want := make([]float64, b*tt)
		for pos := range b * tt {
			if mask.data[pos] == 0 {
				continue
			}
			s := softmaxRef(student.data[pos*v:(pos+1)*v], tau)
			q := softmaxRef(teacher.data[pos*v:(pos+1)*v], tau)
			var d float64
			switch beta {
			case 0:
				d = klRef(q, s)
			case 1:
				d = klRef(s, q)
			default:
				m := make([]float64, v)
				for i := range m {
					m[i] = beta*q[i] + (1-beta)*s[i]
				}
				d = beta*klRef(q, m) + (1-beta)*klRef(s, m)
			}
			want[pos] = d
			sum += d
			n++
		}
		expectArr(t, tight, "gkd D", out["d"], arr{data: want, dims: []int{b, tt}})
		expectArr(t, tight, "gkd loss", out["loss"], scalarArr(sum/float64(n)))
		for _, g := range out["teacher_grad"].data {
			if g != 0 {
				t.Fatalf("beta %g: the teacher logits received a gradient", beta)
			}
		}
	}
}

// TestTiePoints checks gradients at the kinks of the stable forms used inside
// (softplus at 0, which routes through |x|, and logsumexp at x = y), where a
// one-sided derivative would give the wrong gradient.
func TestTiePoints(t *testing.T) {
	zeros := vector([]float64{-5, -5})
	out := runGraph(t, []arr{zeros, zeros, zeros, zeros}, func(in []*Node) (graphOutputs, error) {
		dpo, err := DPO(PairBatch{PolicyChosen: in[0], PolicyRejected: in[1], RefChosen: in[2], RefRejected: in[3]},
			DPOConfig{Beta: 0.1})
		if err != nil {
			return nil, err
		}
		bt, err := BradleyTerry(RewardPairBatch{Chosen: in[0], Rejected: in[1]}, 0)
		if err != nil {
			return nil, err
		}
		return graphOutputs{"dpo": dpo.Loss, "dpo_grad": Gradient(dpo.Loss, in[0])[0],
			"bt_grad": Gradient(bt.Loss, in[0])[0]}, nil
	})
	// −log σ(βh) at h = 0: value log 2, gradient −β·σ(0)/P = −0.1·0.5/2.
	expectArr(t, tight, "dpo at h=0", out["dpo"], scalarArr(math.Ln2))
	expectArr(t, tight, "dpo grad at h=0", out["dpo_grad"], vector([]float64{-0.025, -0.025}))
	expectArr(t, tight, "bradley-terry grad at r_c=r_r", out["bt_grad"], vector([]float64{-0.25, -0.25}))

	// Identical student and teacher: the JSD is at its minimum, the gradient is 0.
	logits := randomArr(rand.New(rand.NewPCG(5, 6)), -2, 2, 1, 2, 4)
	out = runGraph(t, []arr{logits, logits, matrix([][]float64{{1, 1}})}, func(in []*Node) (graphOutputs, error) {
		res, err := GeneralizedJSD(in[0], in[1], in[2], DefaultGKDConfig(), Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}, nil
	})
	expectArr(t, tolerance{Abs: 1e-15}, "jsd of equal distributions", out["loss"], scalarArr(0))
	expectArr(t, tolerance{Abs: 1e-15}, "jsd gradient at its minimum", out["grad"], arr{data: make([]float64, 8), dims: []int{1, 2, 4}})
}

// TestKLGradK2 checks the "k3+" option: value of k3, gradient of k2 = (lp − lq)·w.
func TestKLGradK2(t *testing.T) {
	lp := matrix([][]float64{{-1, -0.5, -2}, {-0.2, -3, -0.4}})
	lq := matrix([][]float64{{-1.2, -0.4, -2.5}, {-0.6, -0.5, -0.1}})
	mask := matrix([][]float64{{1, 1, 0}, {1, 1, 1}})
	for _, grad := range []GradForm{GradDirect, GradK2} {
		out := runGraph(t, []arr{lp, lq, mask}, func(in []*Node) (graphOutputs, error) {
			res, err := KLLoss(in[0], in[1], in[2], KLConfig{Estimator: KLK3, Grad: grad}, Reducer{Mode: AggSum})
			if err != nil {
				return nil, err
			}
			return graphOutputs{"kl": res.Aux["kl"], "grad": Gradient(res.Loss, in[0])[0]}, nil
		})
		wantKL, wantGrad := make([]float64, 6), make([]float64, 6)
		for i := range lp.data {
			if mask.data[i] == 0 {
				continue
			}
			d := lq.data[i] - lp.data[i]
			wantKL[i] = math.Exp(d) - d - 1
			wantGrad[i] = 1 - math.Exp(d)
			if grad == GradK2 {
				wantGrad[i] = lp.data[i] - lq.data[i]
			}
		}
		expectArr(t, tight, string(grad)+" value", out["kl"], arr{data: wantKL, dims: []int{2, 3}})
		expectArr(t, tight, string(grad)+" gradient", out["grad"], arr{data: wantGrad, dims: []int{2, 3}})
	}
}

// TestMicroBatchesAddUp splits a mini-batch into two micro-batches fed with the
// mini-batch denominators (as graph inputs, as a trainer would) and checks that
// the summed losses, gradients and masked-mean metrics equal the full batch's.
func TestMicroBatchesAddUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const rows, cols = 4, 5
	logp := randomArr(rng, -3, -0.1, rows, cols)
	old := randomArr(rng, -3, -0.1, rows, cols)
	adv := randomArr(rng, -1, 1, rows, cols)
	mask := randomMask(rng, 0.6, rows, cols)
	for c := range cols { // row 2 is fully masked: it counts in B but not in B'
		mask.data[2*cols+c] = 0
	}
	counts := CountMask(mask.rows())
	if counts.Rows != 4 || counts.Sequences != 3 {
		t.Fatalf("fixture counts %+v", counts)
	}
	den := []arr{scalarArr(float64(counts.Tokens)), scalarArr(float64(counts.Sequences)), scalarArr(float64(counts.Rows))}
	slice := func(a arr, from, to int) arr {
		return arr{data: a.data[from*cols : to*cols], dims: []int{to - from, cols}}
	}
	for _, mode := range AggModes() {
		build := func(in []*Node) (graphOutputs, error) {
			r := Reducer{Mode: mode, LossScaleFactor: 7}
			if len(in) > 4 {
				r.Denominators = &Denominators{Tokens: in[4], Sequences: in[5], Rows: in[6]}
			}
			res, err := PPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[2], Mask: in[3]},
				PPOConfig{EpsLow: 0.2, EpsHigh: 0.28, DualClipC: 3}, r)
			if err != nil {
				return nil, err
			}
			return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0],
				"clipfrac": res.Metrics["clipfrac"], "ppo_kl": res.Metrics["ppo_kl"]}, nil
		}
		full := runGraph(t, []arr{logp, old, adv, mask}, build)
		var loss, clipfrac, ppoKL float64
		var grad []float64
		for _, part := range [][2]int{{0, 1}, {1, 4}} {
			in := []arr{slice(logp, part[0], part[1]), slice(old, part[0], part[1]), slice(adv, part[0], part[1]),
				slice(mask, part[0], part[1])}
			out := runGraph(t, append(in, den...), build)
			loss += out["loss"].data[0]
			clipfrac += out["clipfrac"].data[0]
			ppoKL += out["ppo_kl"].data[0]
			grad = append(grad, out["grad"].data...)
		}
		label := "micro-batches " + string(mode)
		expectArr(t, tight, label+" loss", scalarArr(loss), full["loss"])
		expectArr(t, tight, label+" grad", arr{data: grad, dims: []int{rows, cols}}, full["grad"])
		expectArr(t, tight, label+" clipfrac", scalarArr(clipfrac), full["clipfrac"])
		expectArr(t, tight, label+" ppo_kl", scalarArr(ppoKL), full["ppo_kl"])
	}
}

// TestAggreVaTeReference checks AggreVaTe (Ross & Bagnell, 2014) against a float64 loop.
func TestAggreVaTeReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	const s, k, tt = 3, 3, 2
	lp := randomArr(rng, -3, -0.1, s, k, tt)
	mask := arr{data: make([]float64, s*k*tt), dims: []int{s, k, tt}}
	for i := range mask.data {
		mask.data[i] = 1
	}
	mask.data[(1*k+2)*tt], mask.data[(1*k+2)*tt+1] = 0, 0 // state 1 has only 2 candidates
	mask.data[(2*k+0)*tt+1] = 0                           // a one-token action
	costs := randomArr(rng, 0, 4, s, k)
	costs.data[2*k], costs.data[2*k+1], costs.data[2*k+2] = 1.5, 1.5, 1.5 // equal costs: no signal
	out := runGraph(t, []arr{lp, mask, costs}, func(in []*Node) (graphOutputs, error) {
		res, err := AggreVaTe(in[0], in[1], in[2], Reducer{Mode: AggSum})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "w": res.Aux["weights"]}, nil
	})
	total := 0.0
	wantW := make([]float64, s*k)
	for st := range s {
		var valid []int
		for c := range k {
			if mask.data[(st*k+c)*tt]+mask.data[(st*k+c)*tt+1] > 0 {
				valid = append(valid, c)
			}
		}
		b := 0.0
		for _, c := range valid {
			b += costs.data[st*k+c]
		}
		b /= float64(len(valid))
		for _, c := range valid {
			w := b - costs.data[st*k+c]
			wantW[st*k+c] = w
			for x := range tt {
				i := (st*k+c)*tt + x
				total -= w * mask.data[i] * lp.data[i]
			}
		}
	}
	expectArr(t, tight, "aggrevate weights", out["w"], arr{data: wantW, dims: []int{s, k}})
	expectArr(t, tight, "aggrevate loss", out["loss"], scalarArr(total))
	for c := range k {
		if wantW[2*k+c] != 0 {
			t.Fatalf("equal costs gave weight %g", wantW[2*k+c])
		}
	}
}

// TestActorPieces checks the actor objective's helpers: entropy, per-token weights of the
// policy loss and the composed actor objective.
func TestActorPieces(t *testing.T) {
	logits := arr{data: []float64{1, 2, 3, math.Inf(-1), 0, 0, 0, 0}, dims: []int{1, 2, 4}}
	old := matrix([][]float64{{-1, -0.1}})
	sampler := matrix([][]float64{{-1.5, -40}})
	adv := matrix([][]float64{{0.5, -1}})
	mask := matrix([][]float64{{1, 1}})
	w := []float64{math.Exp(0.5), 2}
	weights := matrix([][]float64{w})
	out := runGraph(t, []arr{logits, old, sampler, adv, mask, weights}, func(in []*Node) (graphOutputs, error) {
		g := in[0].Graph()
		h := Reshape(Entropy(in[0]), 1, 2)
		w := in[5]
		lp := in[1] // on-policy: logp = old_logp
		pg, err := PolicyGradient(PolicyBatch{LogProbs: lp, Advantages: in[3], Mask: in[4], TokenWeights: w}, Reducer{})
		if err != nil {
			return nil, err
		}
		kl, err := KL(lp, in[2], KLConfig{Estimator: KLK1})
		if err != nil {
			return nil, err
		}
		actor, err := ActorLoss(pg, ActorTerms{KL: kl, KLCoef: Scalar(g, in[0].DType(), 0.1),
			Entropy: h, EntropyCoef: Scalar(g, in[0].DType(), 0.01)}, in[4], Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"h": h, "pg": pg.Loss, "actor": actor.Loss, "entropy": actor.Metrics["entropy"],
			"kl_loss": actor.Metrics["kl_loss"], "pg_loss": actor.Metrics["pg_loss"]}, nil
	})
	p := softmaxRef([]float64{1, 2, 3}, 1)
	h0 := -(p[0]*math.Log(p[0]) + p[1]*math.Log(p[1]) + p[2]*math.Log(p[2]))
	h1 := math.Log(4)
	expectArr(t, tight, "entropy", out["h"], matrix([][]float64{{h0, h1}}))
	pg := (-(0.5 * -1 * w[0]) - (-1 * -0.1 * w[1])) / 2
	kl := ((-1 + 1.5) + (-0.1 + 40)) / 2
	ent := (h0 + h1) / 2
	expectArr(t, tight, "pg", out["pg"], scalarArr(pg))
	expectArr(t, tight, "pg_loss metric", out["pg_loss"], scalarArr(pg))
	expectArr(t, tight, "kl_loss metric", out["kl_loss"], scalarArr(kl))
	expectArr(t, tight, "entropy metric", out["entropy"], scalarArr(ent))
	expectArr(t, tight, "actor", out["actor"], scalarArr(pg+0.1*kl-0.01*ent))
}

// TestFlowReferences checks the per-sample σ path of the SDE step (including σ = 1,
// which uses SigmaMax) and FlowGRPOLoss against float64 loops.
func TestFlowReferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n, d = 3, 4
	x, v, xn := randomArr(rng, -1, 1, n, d), randomArr(rng, -1, 1, n, d), randomArr(rng, -1, 1, n, d)
	sig, sigNext := []float64{1, 0.6, 0.3}, []float64{0.85, 0.45, 0.1}
	const a, sigmaMax = 0.7, 0.85
	out := runGraph(t, []arr{x, v, xn, vector(sig), vector(sigNext)}, func(in []*Node) (graphOutputs, error) {
		st, err := SDEStepLogProb(in[0], in[1], in[2], in[3], in[4], SDEConfig{NoiseLevel: a, SigmaMax: sigmaMax})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"mean": st.Mean, "logp": st.LogProb, "logp_sum": st.LogProbSum}, nil
	})
	var wantMean, wantLogp, wantSum []float64
	for i := range n {
		den := sig[i]
		if den >= 1 {
			den = sigmaMax
		}
		sT := a * math.Sqrt(sig[i]/(1-den))
		dt := sigNext[i] - sig[i]
		std := sT * math.Sqrt(-dt)
		lp := 0.0
		for j := range d {
			xi, vi := x.data[i*d+j], v.data[i*d+j]
			mu := xi + (vi+sT*sT/(2*sig[i])*(xi+(1-sig[i])*vi))*dt
			wantMean = append(wantMean, mu)
			r := xn.data[i*d+j] - mu
			lp += -r*r/(2*std*std) - math.Log(std) - 0.5*math.Log(2*math.Pi)
		}
		wantLogp = append(wantLogp, lp/d)
		wantSum = append(wantSum, lp)
	}
	expectArr(t, tight, "sde mean", out["mean"], arr{data: wantMean, dims: []int{n, d}})
	expectArr(t, tight, "sde logp", out["logp"], vector(wantLogp))
	expectArr(t, tight, "sde logp sum", out["logp_sum"], vector(wantSum))

	// FlowGRPOLoss = PPO with ε = 1e-4, mean over entries.
	lp, oldLp := vector([]float64{-1.2, -0.9, -2}), vector([]float64{-1.2, -0.95, -1.9})
	adv := vector([]float64{0.5, -2, 3})
	out = runGraph(t, []arr{lp, oldLp, adv}, func(in []*Node) (graphOutputs, error) {
		res, err := FlowGRPOLoss(in[0], in[1], in[2], nil, DefaultFlowGRPOConfig())
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}, nil
	})
	want, wantGrad := 0.0, make([]float64, 3)
	for i := range 3 {
		rho := math.Exp(lp.data[i] - oldLp.data[i])
		l1 := -adv.data[i] * rho
		l2 := -adv.data[i] * math.Min(math.Max(rho, 1-1e-4), 1+1e-4)
		want += math.Max(l1, l2) / 3
		if l1 >= l2 {
			wantGrad[i] = l1 / 3
		}
	}
	expectArr(t, tight, "flow-grpo loss", out["loss"], scalarArr(want))
	expectArr(t, tight, "flow-grpo grad", out["grad"], vector(wantGrad))
}

// TestFloat32 runs a few losses in float32 (the device dtype) and compares them
// with the float64 results.
func TestFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	logp := randomArr(rng, -3, -0.1, 3, 6)
	old := randomArr(rng, -3, -0.1, 3, 6)
	adv := randomArr(rng, -1, 1, 3, 6)
	mask := randomMask(rng, 0.7, 3, 6)
	logits := randomArr(rng, -5, 5, 3, 6, 7)
	build := func(in []*Node) (graphOutputs, error) {
		outs := graphOutputs{}
		b := PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], SamplerLogProbs: in[1], Advantages: in[2], Mask: in[3]}
		for name, f := range map[string]func() (Result, error){
			"ppo":  func() (Result, error) { return PPO(b, PPOConfig{EpsLow: 0.2, EpsHigh: 0.28, DualClipC: 3}, Reducer{}) },
			"gspo": func() (Result, error) { return GSPO(b, DefaultGSPOConfig(), Reducer{Mode: AggSeqMeanTokenMean}) },
			"kl":   func() (Result, error) { return KLLoss(in[0], in[1], in[3], DefaultKLConfig(), Reducer{}) },
			"gkd": func() (Result, error) {
				return GeneralizedJSD(in[4], Mul(in[4], Scalar(in[4].Graph(), in[4].DType(), 0.7)), in[3], DefaultGKDConfig(), Reducer{})
			},
		} {
			res, err := f()
			if err != nil {
				return nil, err
			}
			outs[name] = res.Loss
			wrt := in[0]
			if name == "gkd" {
				wrt = in[4]
			}
			outs[name+" grad"] = Gradient(res.Loss, wrt)[0]
		}
		return outs, nil
	}
	inputs := []arr{logp, old, adv, mask, logits}
	want := runGraph(t, inputs, build)
	got := runGraph32(t, inputs, build)
	for k := range want {
		expectArr(t, tolerance{Rel: 1e-4, Abs: 1e-6}, "float32 "+k, got[k], want[k])
	}
	expectFinite(t, "float32", got)
}

// TestMetrics checks metric values that the test vectors do not list (ppo_kl, the
// ratio stats, the DPO-family metrics) against float64 loops.
func TestMetrics(t *testing.T) {
	logp := matrix([][]float64{{-1.2, -0.5, -2.3, -9}, {-0.7, -1.6, -0.05, -3}})
	old := matrix([][]float64{{-1, -0.8, -2, 5}, {-0.9, -1.1, -1.35, -2.2}})
	adv := matrix([][]float64{{1.5, 1.5, 1.5, 1.5}, {-0.8, -0.8, -0.8, -0.8}})
	mask := matrix([][]float64{{1, 1, 1, 0}, {1, 1, 1, 1}})
	out := runGraph(t, []arr{logp, old, adv, mask}, func(in []*Node) (graphOutputs, error) {
		res, err := PPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[2], Mask: in[3]}, DefaultPPOConfig(), Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"ppo_kl": res.Metrics["ppo_kl"], "ratio_mean": res.Metrics["ratio_mean"],
			"ratio_max": res.Metrics["ratio_max"], "ratio_min": res.Metrics["ratio_min"]}, nil
	})
	var kl, sum, n float64
	maxR, minR := math.Inf(-1), math.Inf(1)
	for i := range logp.data {
		if mask.data[i] == 0 {
			continue
		}
		r := math.Exp(logp.data[i] - old.data[i])
		kl += old.data[i] - logp.data[i]
		sum += r
		n++
		maxR, minR = math.Max(maxR, r), math.Min(minR, r)
	}
	expectArr(t, tight, "ppo_kl", out["ppo_kl"], scalarArr(kl/n))
	expectArr(t, tight, "ratio_mean", out["ratio_mean"], scalarArr(sum/n))
	expectArr(t, tight, "ratio_max", out["ratio_max"], scalarArr(maxR))
	expectArr(t, tight, "ratio_min", out["ratio_min"], scalarArr(minR))

	// Per-token log-probs → sequence sums → DPO: the per-token gradient is the
	// per-sequence one on completion tokens and 0 on masked (prompt) tokens.
	chosen := matrix([][]float64{{-9, -1, -2}, {-9, -0.5, -0.5}})
	rejected := matrix([][]float64{{-9, -3, -0.1}, {-9, -0.2, -0.2}})
	promptMasked := matrix([][]float64{{0, 1, 1}, {0, 1, 1}})
	ref := vector([]float64{-3.5, -1.2})
	out = runGraph(t, []arr{chosen, rejected, promptMasked, ref}, func(in []*Node) (graphOutputs, error) {
		pc, nc, err := SequenceLogProbs(in[0], in[2])
		if err != nil {
			return nil, err
		}
		pr, _, err := SequenceLogProbs(in[1], in[2])
		if err != nil {
			return nil, err
		}
		res, err := DPO(PairBatch{PolicyChosen: pc, PolicyRejected: pr, RefChosen: in[3], RefRejected: in[3]}, DPOConfig{Beta: 0.5})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"pc": pc, "nc": nc, "grad": Gradient(res.Loss, in[0])[0], "accuracy": res.Metrics["accuracy"],
			"margins": res.Metrics["margins"], "chosen_rewards": res.Metrics["chosen_rewards"],
			"rejected_rewards": res.Metrics["rejected_rewards"]}, nil
	})
	pcs, prs := []float64{-3, -1}, []float64{-3.1, -0.4}
	expectArr(t, tight, "sequence sums", out["pc"], vector(pcs))
	expectArr(t, tight, "sequence lengths", out["nc"], vector([]float64{2, 2}))
	var acc, margin, cr, rr float64
	grad := make([]float64, 6)
	for i := range 2 {
		h := (pcs[i] - ref.data[i]) - (prs[i] - ref.data[i])
		if h > 0 {
			acc += 0.5
		}
		margin += 0.5 * 0.5 * h
		cr += 0.5 * 0.5 * (pcs[i] - ref.data[i])
		rr += 0.5 * 0.5 * (prs[i] - ref.data[i])
		g := -0.5 * (1 / (1 + math.Exp(0.5*h))) / 2 // d/dP_c of mean −log σ(βh)
		grad[i*3+1], grad[i*3+2] = g, g
	}
	expectArr(t, tight, "dpo per-token grad", out["grad"], arr{data: grad, dims: []int{2, 3}})
	expectArr(t, tight, "dpo accuracy", out["accuracy"], scalarArr(acc))
	expectArr(t, tight, "dpo margins", out["margins"], scalarArr(margin))
	expectArr(t, tight, "dpo chosen_rewards", out["chosen_rewards"], scalarArr(cr))
	expectArr(t, tight, "dpo rejected_rewards", out["rejected_rewards"], scalarArr(rr))

	// Mixed CE + K3 with k3_grad = "k2": ∂L/∂lpS = (1 − β)(lpS − lpT)/Σ m^𝒮.
	lpS := matrix([][]float64{{-0.6, -1.1, -0.3}})
	lpT := matrix([][]float64{{-0.9, -0.7, -0.3}})
	m := matrix([][]float64{{1, 1, 0}})
	out = runGraph(t, []arr{lpS, lpT, m}, func(in []*Node) (graphOutputs, error) {
		res, err := MixedCEK3(MixedBatch{StudentOnStudent: in[0], TeacherOnStudent: in[1], StudentMask: in[2]},
			Scalar(in[0].Graph(), in[0].DType(), 0.25), MixedCEK3Config{K3Grad: GradK2})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"grad": Gradient(res.Loss, in[0])[0], "ce": res.Metrics["ce"]}, nil
	})
	expectArr(t, tight, "mixed k2 grad", out["grad"], matrix([][]float64{{0.75 * 0.3 / 2, 0.75 * -0.4 / 2, 0}}))
	expectArr(t, tight, "mixed without teacher set", out["ce"], scalarArr(0))
}
