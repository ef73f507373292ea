package loss

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// fdCheck compares the autodiff gradient of build's scalar loss w.r.t. input wrt
// with central finite differences (float64, h = 1e-6) on every element. Inputs
// listed in tied move with input wrt: a loss whose spec gradient holds a ratio
// constant (CISPO's sg(clip ρ)) is checked by shifting logp and old_logp together,
// which leaves ρ unchanged.
func fdCheck(t *testing.T, inputs []arr, wrt int, build func(in []*Node) (*Node, error), tied ...int) {
	t.Helper()
	ev, err := newEvaluator(backend(t), false, func(in []*Node) (graphOutputs, error) {
		l, err := build(in)
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": l, "grad": Gradient(l, in[wrt])[0]}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ev.exec.Finalize()
	base, err := ev.run(inputs)
	if err != nil {
		t.Fatal(err)
	}
	const h = 1e-6
	grad := base["grad"]
	perturbed := make([]arr, len(inputs))
	copy(perturbed, inputs)
	checked := 0
	for i := range inputs[wrt].data {
		at := func(delta float64) float64 {
			for _, j := range append([]int{wrt}, tied...) {
				x := arr{data: append([]float64(nil), inputs[j].data...), dims: inputs[j].dims}
				x.data[i] += delta
				perturbed[j] = x
			}
			out, err := ev.run(perturbed)
			if err != nil {
				t.Fatal(err)
			}
			return out["loss"].data[0]
		}
		fd := (at(h) - at(-h)) / (2 * h)
		if got := grad.data[i]; math.Abs(got-fd) > 1e-6+1e-5*math.Abs(fd) || math.IsNaN(got) {
			t.Errorf("d loss / d input%d[%d]: autodiff %.10g, finite difference %.10g", wrt, i, got, fd)
		}
		if grad.data[i] != 0 {
			checked++
		}
	}
	// A check of an all-zero gradient would prove little: make sure the point is generic.
	if checked == 0 {
		t.Errorf("gradient is zero everywhere: the finite-difference check is vacuous")
	}
}

// randomArr draws values uniformly in [lo, hi).
func randomArr(rng *rand.Rand, lo, hi float64, dims ...int) arr {
	n := 1
	for _, d := range dims {
		n *= d
	}
	a := arr{data: make([]float64, n), dims: dims}
	for i := range a.data {
		a.data[i] = lo + (hi-lo)*rng.Float64()
	}
	return a
}

// randomMask is a 0/1 mask with about keep of the positions set and row 0 full.
func randomMask(rng *rand.Rand, keep float64, rows, cols int) arr {
	a := arr{data: make([]float64, rows*cols), dims: []int{rows, cols}}
	for i := range a.data {
		if i < cols || rng.Float64() < keep {
			a.data[i] = 1
		}
	}
	return a
}

func TestGradientsFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(20260601, 7))
	const rows, cols = 3, 5
	logp := randomArr(rng, -3, -0.1, rows, cols)
	old := arr{data: make([]float64, rows*cols), dims: []int{rows, cols}}
	for i, v := range logp.data {
		old.data[i] = v + 0.6*(rng.Float64()-0.5) // ratios in about [0.74, 1.35]
	}
	adv := randomArr(rng, -1.5, 1.5, rows, cols)
	mask := randomMask(rng, 0.7, rows, cols)
	policyInputs := []arr{logp, old, adv, mask}
	policy := func(in []*Node) PolicyBatch {
		return PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], SamplerLogProbs: in[1], Advantages: in[2], Mask: in[3]}
	}

	policyLosses := map[string]func(b PolicyBatch, r Reducer) (Result, error){
		"ppo_dual_clip": func(b PolicyBatch, r Reducer) (Result, error) {
			return PPO(b, PPOConfig{EpsLow: 0.1, EpsHigh: 0.15, DualClipC: 1.2}, r)
		},
		"importance_sampling": func(b PolicyBatch, r Reducer) (Result, error) { return ImportanceSampling(b, 0, r) },
		"dro":                 func(b PolicyBatch, r Reducer) (Result, error) { return DRO(b, 0.3, r) },
		"pg":                  PolicyGradient,
	}
	for name, lossFn := range policyLosses {
		for _, mode := range []AggMode{AggTokenMean, AggSeqMeanTokenMean} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				fdCheck(t, policyInputs, 0, func(in []*Node) (*Node, error) {
					res, err := lossFn(policy(in), Reducer{Mode: mode})
					return res.Loss, err
				})
			})
		}
	}

	// CISPO's gradient −clip(ρ)·A·w treats ρ as a constant: shift old_logp with logp.
	for _, mode := range []AggMode{AggTokenMean, AggSeqMeanTokenMean} {
		t.Run("cispo/"+string(mode), func(t *testing.T) {
			fdCheck(t, policyInputs, 0, func(in []*Node) (*Node, error) {
				res, err := CISPO(policy(in), CISPOConfig{ClipLow: 0.9, ClipHigh: 1.1}, Reducer{Mode: mode})
				return res.Loss, err
			}, 1)
		})
	}
	// GSPO's token form equals the sequence objective (1/B')Σ_b max(−A_b s_b, −A_b clip(s_b))
	// when A is constant per row and the mode is seq-mean-token-mean: then its spec
	// gradient is the true derivative of the loss value.
	t.Run("gspo/seq-mean-token-mean", func(t *testing.T) {
		rowAdv := arr{data: make([]float64, rows*cols), dims: []int{rows, cols}}
		for i := range rowAdv.data {
			rowAdv.data[i] = []float64{0.9, -1.3, 0.4}[i/cols]
		}
		fdCheck(t, []arr{logp, old, rowAdv, mask}, 0, func(in []*Node) (*Node, error) {
			res, err := GSPO(policy(in), GSPOConfig{EpsLow: 0.01, EpsHigh: 0.02}, Reducer{Mode: AggSeqMeanTokenMean})
			return res.Loss, err
		})
	})

	t.Run("kl_k3", func(t *testing.T) {
		fdCheck(t, []arr{logp, old, mask}, 0, func(in []*Node) (*Node, error) {
			res, err := KLLoss(in[0], in[1], in[2], DefaultKLConfig(), Reducer{Mode: AggSeqMeanTokenSum})
			return res.Loss, err
		})
	})
	t.Run("value_clipped", func(t *testing.T) {
		values := randomArr(rng, -1, 1, rows, cols)
		oldValues := randomArr(rng, -1, 1, rows, cols)
		returns := randomArr(rng, -1, 1, rows, cols)
		fdCheck(t, []arr{values, oldValues, returns, mask}, 0, func(in []*Node) (*Node, error) {
			res, err := ValueLoss(in[0], in[1], in[2], in[3], ValueConfig{ClipRange: 0.3}, Reducer{})
			return res.Loss, err
		})
	})
	t.Run("sft", func(t *testing.T) {
		fdCheck(t, []arr{logp, mask}, 0, func(in []*Node) (*Node, error) {
			res, err := SFT(in[0], in[1], Reducer{Mode: AggSeqMeanTokenSumNorm, LossScaleFactor: 8})
			return res.Loss, err
		})
	})

	const pairs = 4
	pc, pr := randomArr(rng, -30, -5, pairs), randomArr(rng, -30, -5, pairs)
	rc, rr := randomArr(rng, -30, -5, pairs), randomArr(rng, -30, -5, pairs)
	lc, lr := vector([]float64{10, 25, 6, 0}), vector([]float64{12, 20, 8, 9}) // a zero length is replaced by 1
	pairInputs := []arr{pc, pr, rc, rr, lc, lr}
	pairBatch := func(in []*Node) PairBatch {
		return PairBatch{PolicyChosen: in[0], PolicyRejected: in[1], RefChosen: in[2], RefRejected: in[3],
			ChosenLengths: in[4], RejectedLengths: in[5]}
	}
	pairLosses := map[string]func(b PairBatch) (Result, error){
		"dpo_sigmoid": func(b PairBatch) (Result, error) { return DPO(b, DefaultDPOConfig()) },
		"cdpo":        func(b PairBatch) (Result, error) { return DPO(b, DPOConfig{Beta: 0.2, LabelSmoothing: 0.2}) },
		"ipo":         func(b PairBatch) (Result, error) { return DPO(b, DPOConfig{Type: DPOIPO, Beta: 0.1}) },
		"ipo_summed":  func(b PairBatch) (Result, error) { return DPO(b, DPOConfig{Type: DPOIPO, Beta: 0.1, IPOSummed: true}) },
		"simpo": func(b PairBatch) (Result, error) {
			return SimPO(b, SimPOConfig{Beta: 2, Gamma: 1, LabelSmoothing: 0.1})
		},
		"orpo": func(b PairBatch) (Result, error) { return ORPO(b, 0.1) },
	}
	for name, lossFn := range pairLosses {
		for wrt := range 2 {
			t.Run(name+[]string{"/chosen", "/rejected"}[wrt], func(t *testing.T) {
				fdCheck(t, pairInputs, wrt, func(in []*Node) (*Node, error) {
					res, err := lossFn(pairBatch(in))
					return res.Loss, err
				})
			})
		}
	}
	t.Run("orpo_near_zero_logp", func(t *testing.T) {
		// P̄ around −0.05 and −2: both branches of log(1 − e^a).
		fdCheck(t, []arr{vector([]float64{-0.5, -20, -0.02}), vector([]float64{-30, -0.3, -9}), vector([]float64{-1, -1, -1}),
			vector([]float64{-1, -1, -1}), vector([]float64{10, 10, 1}), vector([]float64{15, 5, 3})}, 0, func(in []*Node) (*Node, error) {
			res, err := ORPO(pairBatch(in), 0.5)
			return res.Loss, err
		})
	})
	t.Run("kto", func(t *testing.T) {
		fdCheck(t, []arr{pc, rc, vector([]float64{1, 0, 1, 0}), pr, rr}, 0, func(in []*Node) (*Node, error) {
			res, err := KTO(KTOBatch{PolicyLogps: in[0], RefLogps: in[1], Desirable: in[2], KLPolicyLogps: in[3], KLRefLogps: in[4]},
				KTOConfig{Beta: 0.1, DesirableWeight: 1, UndesirableWeight: 1.2})
			return res.Loss, err
		})
	})
	t.Run("bradley_terry_centered", func(t *testing.T) {
		fdCheck(t, []arr{randomArr(rng, -2, 2, pairs), randomArr(rng, -2, 2, pairs), randomArr(rng, 0, 1, pairs)}, 1,
			func(in []*Node) (*Node, error) {
				res, err := BradleyTerry(RewardPairBatch{Chosen: in[0], Rejected: in[1], Margin: in[2]}, 0.01)
				return res.Loss, err
			})
	})

	const vocab = 6
	student := randomArr(rng, -3, 3, 2, 3, vocab)
	teacher := randomArr(rng, -3, 3, 2, 3, vocab)
	gkdMask := matrix([][]float64{{1, 1, 0}, {1, 0, 1}})
	for _, beta := range []float64{0, 0.3, 1} {
		t.Run("gkd/beta"+strconv.FormatFloat(beta, 'g', -1, 64), func(t *testing.T) {
			fdCheck(t, []arr{student, teacher, gkdMask}, 0, func(in []*Node) (*Node, error) {
				res, err := GeneralizedJSD(in[0], in[1], in[2], GKDConfig{Beta: beta, Temperature: 1.7}, Reducer{})
				return res.Loss, err
			})
		})
	}
	t.Run("entropy", func(t *testing.T) {
		fdCheck(t, []arr{student}, 0, func(in []*Node) (*Node, error) {
			return ReduceAllSum(Mul(Entropy(in[0]), Scalar(in[0].Graph(), in[0].DType(), 0.7))), nil
		})
	})
	t.Run("aggrevate", func(t *testing.T) {
		lp := randomArr(rng, -3, -0.1, 2, 3, 4)
		m := arr{data: make([]float64, 24), dims: []int{2, 3, 4}}
		for i := range m.data {
			if i%4 < 3 && i != 20 && i != 21 && i != 22 { // state 1, candidate 2 has no token
				m.data[i] = 1
			}
		}
		fdCheck(t, []arr{lp, m, randomArr(rng, 0, 5, 2, 3)}, 0, func(in []*Node) (*Node, error) {
			res, err := AggreVaTe(in[0], in[1], in[2], Reducer{Mode: AggSeqMeanTokenSum})
			return res.Loss, err
		})
	})
	t.Run("mixed_ce_k3", func(t *testing.T) {
		fdCheck(t, []arr{logp, mask, old, logp, mask}, 2, func(in []*Node) (*Node, error) {
			res, err := MixedCEK3(MixedBatch{StudentOnTeacher: in[0], TeacherMask: in[1], StudentOnStudent: in[2],
				TeacherOnStudent: in[3], StudentMask: in[4]}, Scalar(in[0].Graph(), in[0].DType(), 0.4), MixedCEK3Config{})
			return res.Loss, err
		})
	})
	t.Run("sde_step_logprob", func(t *testing.T) {
		x, v, xn := randomArr(rng, -1, 1, 3, 4), randomArr(rng, -1, 1, 3, 4), randomArr(rng, -1, 1, 3, 4)
		fdCheck(t, []arr{x, v, xn, vector([]float64{1, 0.7, 0.4}), vector([]float64{0.9, 0.5, 0.2})}, 1,
			func(in []*Node) (*Node, error) {
				st, err := SDEStepLogProb(in[0], in[1], in[2], in[3], in[4], SDEConfig{NoiseLevel: 0.7, SigmaMax: 0.9})
				if err != nil {
					return nil, err
				}
				return ReduceAllSum(Mul(st.LogProb, Const(in[0].Graph(), []float64{1, -2, 0.5}))), nil
			})
	})
	t.Run("rectified_flow", func(t *testing.T) {
		fdCheck(t, []arr{randomArr(rng, -1, 1, 3, 2, 2), randomArr(rng, -1, 1, 3, 2, 2)}, 0, func(in []*Node) (*Node, error) {
			res, err := RectifiedFlowLoss(in[0], in[1], nil)
			return res.Loss, err
		})
	})
}
