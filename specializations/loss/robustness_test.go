package loss

import (
	"math"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

var inf = math.Inf(1)

// tokenLosses builds every token-level loss of the package on (logp, other, adv,
// mask) with reducer r and returns its loss, gradient w.r.t. logp, metrics
// and aux outputs under prefixed names.
func tokenLosses(in []*Node, r Reducer) (graphOutputs, error) {
	b := PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], SamplerLogProbs: in[1], Advantages: in[2], Mask: in[3]}
	g := in[0].Graph()
	builders := map[string]func() (Result, error){
		"ppo":    func() (Result, error) { return PPO(b, PPOConfig{EpsLow: 0.2, EpsHigh: 0.28, DualClipC: 3}, r) },
		"gspo":   func() (Result, error) { return GSPO(b, DefaultGSPOConfig(), r) },
		"cispo":  func() (Result, error) { return CISPO(b, DefaultCISPOConfig(), r) },
		"is":     func() (Result, error) { return ImportanceSampling(b, 0, r) },
		"dro":    func() (Result, error) { return DRO(b, 0.05, r) },
		"pg":     func() (Result, error) { return PolicyGradient(b, r) },
		"k1":     func() (Result, error) { return KLLoss(in[0], in[1], in[3], KLConfig{Estimator: KLK1}, r) },
		"k2":     func() (Result, error) { return KLLoss(in[0], in[1], in[3], KLConfig{Estimator: KLK2}, r) },
		"k3":     func() (Result, error) { return KLLoss(in[0], in[1], in[3], DefaultKLConfig(), r) },
		"k3plus": func() (Result, error) { return KLLoss(in[0], in[1], in[3], KLConfig{Grad: GradK2}, r) },
		"value":  func() (Result, error) { return ValueLoss(in[0], in[1], in[2], in[3], DefaultValueConfig(), r) },
		"sft":    func() (Result, error) { return SFT(in[0], in[3], r) },
		"mixed": func() (Result, error) {
			return MixedCEK3(MixedBatch{StudentOnTeacher: in[0], TeacherMask: in[3], StudentOnStudent: in[0],
				TeacherOnStudent: in[1], StudentMask: in[3]}, Scalar(g, in[0].DType(), 0.5), MixedCEK3Config{K3Grad: GradK2})
		},
	}
	outs := graphOutputs{}
	for name, build := range builders {
		res, err := build()
		if err != nil {
			return nil, err
		}
		outs[name+" loss"] = res.Loss
		outs[name+" grad"] = Gradient(res.Loss, in[0])[0]
		for k, v := range res.Metrics {
			outs[name+" metric "+k] = v
		}
		for k, v := range res.Aux {
			outs[name+" aux "+k] = v
		}
	}
	return outs, nil
}

// TestExtremeTokenInputs feeds huge log-ratios (±1e4), −Inf log-probs and a 1e30
// advantage at masked positions, and checks that nothing non-finite comes out.
func TestExtremeTokenInputs(t *testing.T) {
	logp := matrix([][]float64{{-1e4, 0, -50, -inf}, {-0.5, -1e4, -3, -1}})
	other := matrix([][]float64{{0, -1e4, -0.1, -inf}, {-1e4, -0.5, -3, -2}})
	adv := matrix([][]float64{{5, -5, 1e3, 1e30}, {-2, 2, 0, -1}})
	mask := matrix([][]float64{{1, 1, 1, 0}, {1, 1, 1, 1}})
	for _, mode := range AggModes() {
		out := runGraph(t, []arr{logp, other, adv, mask}, func(in []*Node) (graphOutputs, error) {
			return tokenLosses(in, Reducer{Mode: mode})
		})
		expectFinite(t, string(mode), out)
		for k, a := range out {
			if strings.HasSuffix(k, " grad") && a.data[3] != 0 {
				t.Errorf("%s %s: masked position got gradient %g", mode, k, a.data[3])
			}
		}
	}
}

// TestEmptyMask checks the aggregation's empty rule for every token loss: exactly 0
// loss, exactly 0 gradient, finite metrics.
func TestEmptyMask(t *testing.T) {
	logp := matrix([][]float64{{-1, -2, -inf}, {-0.5, -3, -1}})
	other := matrix([][]float64{{-1.5, -2, -inf}, {-0.1, -3, -4}})
	adv := matrix([][]float64{{1, -1, 2}, {0.5, 0.5, 0.5}})
	empty := matrix([][]float64{{0, 0, 0}, {0, 0, 0}})
	for _, mode := range AggModes() {
		out := runGraph(t, []arr{logp, other, adv, empty, other}, func(in []*Node) (graphOutputs, error) {
			return tokenLosses(in, Reducer{Mode: mode})
		})
		expectFinite(t, string(mode), out)
		for k, a := range out {
			if strings.HasSuffix(k, " loss") || strings.HasSuffix(k, " grad") {
				for i, v := range a.data {
					if v != 0 {
						t.Errorf("%s %s[%d] = %g with an empty mask, want exactly 0", mode, k, i, v)
					}
				}
			}
		}
	}
}

// TestExtremeSequenceInputs covers the sequence-level losses with huge margins,
// completions of length 0 and average log-probs at 0 (ORPO's log(1 − e^a) edge).
func TestExtremeSequenceInputs(t *testing.T) {
	pc := vector([]float64{-1e4, 0, -1e-3, -30})
	pr := vector([]float64{0, -1e4, -1e-3, -1e-9})
	rc := vector([]float64{0, -1e4, -1e-3, -30})
	rr := vector([]float64{-1e4, 0, -1e-3, -2})
	lc := vector([]float64{1, 0, 3, 10})
	lr := vector([]float64{2, 5, 0, 1})
	des := vector([]float64{1, 0, 1, 0})
	out := runGraph(t, []arr{pc, pr, rc, rr, lc, lr, des}, func(in []*Node) (graphOutputs, error) {
		pb := PairBatch{PolicyChosen: in[0], PolicyRejected: in[1], RefChosen: in[2], RefRejected: in[3],
			ChosenLengths: in[4], RejectedLengths: in[5]}
		builders := map[string]func() (Result, error){
			"dpo":   func() (Result, error) { return DPO(pb, DefaultDPOConfig()) },
			"cdpo":  func() (Result, error) { return DPO(pb, DPOConfig{Beta: 0.1, LabelSmoothing: 0.1}) },
			"hinge": func() (Result, error) { return DPO(pb, DPOConfig{Type: DPOHinge, Beta: 0.1}) },
			"ipo":   func() (Result, error) { return DPO(pb, DPOConfig{Type: DPOIPO, Beta: 0.1}) },
			"simpo": func() (Result, error) { return SimPO(pb, DefaultSimPOConfig()) },
			"orpo":  func() (Result, error) { return ORPO(pb, 0.1) },
			"kto": func() (Result, error) {
				return KTO(KTOBatch{in[0], in[2], in[6], in[1], in[3], nil, nil}, DefaultKTOConfig())
			},
			"bt":        func() (Result, error) { return BradleyTerry(RewardPairBatch{Chosen: in[0], Rejected: in[1]}, 0.01) },
			"flow":      func() (Result, error) { return RectifiedFlowLoss(in[0], in[1], nil) },
			"flow_grpo": func() (Result, error) { return FlowGRPOLoss(in[0], in[1], in[6], nil, DefaultFlowGRPOConfig()) },
		}
		outs := graphOutputs{}
		for name, build := range builders {
			res, err := build()
			if err != nil {
				return nil, err
			}
			outs[name+" loss"] = res.Loss
			grads := Gradient(res.Loss, in[0], in[1])
			outs[name+" grad0"], outs[name+" grad1"] = grads[0], grads[1]
			for k, v := range res.Metrics {
				outs[name+" metric "+k] = v
			}
			for k, v := range res.Aux {
				outs[name+" aux "+k] = v
			}
		}
		return outs, nil
	})
	expectFinite(t, "sequence losses", out)
}

// TestGKDExtremeLogits uses logits of ±1e4, a small temperature and a token banned
// (−Inf) in both models.
func TestGKDExtremeLogits(t *testing.T) {
	student := arr{data: []float64{1e4, -1e4, 0, -inf, 3, 2, 1, -inf}, dims: []int{1, 2, 4}}
	teacher := arr{data: []float64{-1e4, 1e4, 5, -inf, 1, 1, 1, -inf}, dims: []int{1, 2, 4}}
	mask := matrix([][]float64{{1, 1}})
	for _, beta := range []float64{0, 0.5, 1} {
		out := runGraph(t, []arr{student, teacher, mask}, func(in []*Node) (graphOutputs, error) {
			res, err := GeneralizedJSD(in[0], in[1], in[2], GKDConfig{Beta: beta, Temperature: 0.1}, Reducer{})
			if err != nil {
				return nil, err
			}
			h := Entropy(in[0])
			return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0], "entropy": h,
				"entropy grad": Gradient(ReduceAllSum(h), in[0])[0]}, nil
		})
		expectFinite(t, "gkd", out)
	}
}

// TestEmptyPairBatches covers an empty preference mini-batch expressed as a count of
// 0: zero loss and zero gradient. (Zero-size shapes are not usable: SimpleGo v0.26's
// Where indexes element 0 of its operands and panics on a [0] tensor.)
func TestEmptyPairBatches(t *testing.T) {
	v := vector([]float64{-3, -4})
	out := runGraph(t, []arr{v, v, scalarArr(0)}, func(in []*Node) (graphOutputs, error) {
		res, err := BradleyTerry(RewardPairBatch{Chosen: in[0], Rejected: in[1], Count: in[2]}, 0)
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}, nil
	})
	expectArr(t, tight, "zero count loss", out["loss"], scalarArr(0))
	expectArr(t, tight, "zero count grad", out["grad"], vector([]float64{0, 0}))
}

// TestInvalidConfigs checks that bad configurations and shapes are errors, not panics.
func TestInvalidConfigs(t *testing.T) {
	tok := matrix([][]float64{{-1, -2}, {-0.5, -3}})
	vec := vector([]float64{-1, -2})
	cases := map[string]func(in []*Node) (Result, error){
		"agg mode": func(in []*Node) (Result, error) {
			return PolicyGradient(PolicyBatch{LogProbs: in[0], Advantages: in[0], Mask: in[0]}, Reducer{Mode: "mean"})
		},
		"negative loss scale": func(in []*Node) (Result, error) {
			return SFT(in[0], in[0], Reducer{Mode: AggSeqMeanTokenSumNorm, LossScaleFactor: -1})
		},
		"ppo missing old": func(in []*Node) (Result, error) {
			return PPO(PolicyBatch{LogProbs: in[0], Advantages: in[0], Mask: in[0]}, DefaultPPOConfig(), Reducer{})
		},
		"ppo dual clip": func(in []*Node) (Result, error) {
			return PPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[0], Advantages: in[0], Mask: in[0]},
				PPOConfig{EpsLow: 0.2, EpsHigh: 0.2, DualClipC: 0.5}, Reducer{})
		},
		"ppo shape": func(in []*Node) (Result, error) {
			return PPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[0], Mask: in[0]}, DefaultPPOConfig(), Reducer{})
		},
		"cispo bounds": func(in []*Node) (Result, error) {
			return CISPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[0], Advantages: in[0], Mask: in[0]},
				CISPOConfig{ClipLow: 2, ClipHigh: 1}, Reducer{})
		},
		"is missing sampler": func(in []*Node) (Result, error) {
			return ImportanceSampling(PolicyBatch{LogProbs: in[0], OldLogProbs: in[0], Advantages: in[0], Mask: in[0]}, 0, Reducer{})
		},
		"kl estimator": func(in []*Node) (Result, error) {
			return KLLoss(in[0], in[0], in[0], KLConfig{Estimator: "k4"}, Reducer{})
		},
		"kl grad form": func(in []*Node) (Result, error) {
			return KLLoss(in[0], in[0], in[0], KLConfig{Grad: "k1"}, Reducer{})
		},
		"value clip": func(in []*Node) (Result, error) {
			return ValueLoss(in[0], in[0], in[0], in[0], ValueConfig{ClipRange: -1}, Reducer{})
		},
		"dpo type": func(in []*Node) (Result, error) {
			return DPO(PairBatch{PolicyChosen: in[1], PolicyRejected: in[1], RefChosen: in[1], RefRejected: in[1]},
				DPOConfig{Type: "robust", Beta: 0.1})
		},
		"dpo smoothing on hinge": func(in []*Node) (Result, error) {
			return DPO(PairBatch{PolicyChosen: in[1], PolicyRejected: in[1], RefChosen: in[1], RefRejected: in[1]},
				DPOConfig{Type: DPOHinge, Beta: 0.1, LabelSmoothing: 0.1})
		},
		"ipo needs lengths": func(in []*Node) (Result, error) {
			return DPO(PairBatch{PolicyChosen: in[1], PolicyRejected: in[1], RefChosen: in[1], RefRejected: in[1]},
				DPOConfig{Type: DPOIPO, Beta: 0.1})
		},
		"simpo beta": func(in []*Node) (Result, error) {
			return SimPO(PairBatch{PolicyChosen: in[1], PolicyRejected: in[1], ChosenLengths: in[1], RejectedLengths: in[1]},
				SimPOConfig{})
		},
		"kto missing kl pairs": func(in []*Node) (Result, error) {
			return KTO(KTOBatch{PolicyLogps: in[1], RefLogps: in[1], Desirable: in[1]}, DefaultKTOConfig())
		},
		"gkd beta": func(in []*Node) (Result, error) {
			l := InsertAxes(in[0], -1)
			return GeneralizedJSD(l, l, in[0], GKDConfig{Beta: 1.5, Temperature: 1}, Reducer{})
		},
		"gkd rank": func(in []*Node) (Result, error) {
			return GeneralizedJSD(in[0], in[0], in[0], DefaultGKDConfig(), Reducer{})
		},
		"mixed beta": func(in []*Node) (Result, error) {
			return MixedCEK3(MixedBatch{StudentOnTeacher: in[0], TeacherMask: in[0]}, in[1], MixedCEK3Config{})
		},
		"mixed empty": func(in []*Node) (Result, error) {
			return MixedCEK3(MixedBatch{}, Scalar(in[0].Graph(), in[0].DType(), 0.5), MixedCEK3Config{})
		},
		"sde sigma max": func(in []*Node) (Result, error) {
			_, err := SDEStepLogProb(in[0], in[0], in[0], in[1], in[1], SDEConfig{})
			return Result{}, err
		},
	}
	for name, build := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			_, err := runGraphErr(backend(t), []arr{tok, vec}, func(in []*Node) (graphOutputs, error) {
				res, err := build(in)
				if err != nil {
					return nil, err
				}
				return graphOutputs{"loss": res.Loss}, nil
			})
			if err == nil {
				t.Fatalf("no error")
			}
			t.Logf("%v", err)
		})
	}
	if _, err := ParseAggMode("seq-mean"); err == nil {
		t.Errorf("ParseAggMode accepted an unknown mode")
	}
	if _, err := BetaAt(BetaSchedule{Start: 1}, 3); err == nil {
		t.Errorf("BetaAt accepted decay_rollouts = 0")
	}
	if _, err := OPDAdvantages([][]float64{{1}}, [][]float64{{1, 2}}, [][]float64{{1}}, nil, DefaultOPDConfig()); err == nil {
		t.Errorf("OPDAdvantages accepted ragged inputs")
	}
	if _, err := KLPenaltyRewards([][]float64{{1}}, [][]float64{{1}}, nil, 0.1, KLConfig{Estimator: KLK1}); err == nil {
		t.Errorf("KLPenaltyRewards accepted a missing ref_logp")
	}
}
