package loss

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// vectorFile is the test-vector file.
const vectorFile = "../../testdata/algorithms.json"

// sectionsOwned are the sections of the test-vector file whose every case this package must consume.
const sectionsOwned = "BCDEFH"

// vecCase is one test vector. Every input, param and output is read through the
// accessors, which record it: a case whose fields are not all consumed fails, so a
// new field (or a new case) cannot be skipped silently.
type vecCase struct {
	Name, Fn, Section, Note string
	Inputs, Params, Outputs map[string]json.RawMessage

	t    *testing.T
	tol  tolerance
	used map[string]bool
}

func (c *vecCase) raw(kind string, m map[string]json.RawMessage, name string) json.RawMessage {
	c.t.Helper()
	v, ok := m[name]
	if !ok {
		c.t.Fatalf("%s: %s %q missing", c.Name, kind, name)
	}
	c.used[kind+"."+name] = true
	return v
}

func (c *vecCase) arr(kind string, m map[string]json.RawMessage, name string) arr {
	c.t.Helper()
	a, err := parseArr(c.raw(kind, m, name))
	if err != nil {
		c.t.Fatalf("%s: %s %q: %v", c.Name, kind, name, err)
	}
	return a
}

func (c *vecCase) in(name string) arr { c.t.Helper(); return c.arr("inputs", c.Inputs, name) }

func (c *vecCase) hasIn(name string) bool { _, ok := c.Inputs[name]; return ok }

func (c *vecCase) hasParam(name string) bool { _, ok := c.Params[name]; return ok }

func (c *vecCase) hasOut(name string) bool { _, ok := c.Outputs[name]; return ok }

func (c *vecCase) param(name string) float64 {
	c.t.Helper()
	a := c.arr("params", c.Params, name)
	if len(a.dims) != 0 {
		c.t.Fatalf("%s: param %q is not a number", c.Name, name)
	}
	return a.data[0]
}

// paramOr returns the param if the case has it, else def.
func (c *vecCase) paramOr(name string, def float64) float64 {
	if !c.hasParam(name) {
		return def
	}
	return c.param(name)
}

func (c *vecCase) paramStr(name string) string {
	c.t.Helper()
	var s string
	if err := json.Unmarshal(c.raw("params", c.Params, name), &s); err != nil {
		c.t.Fatalf("%s: param %q: %v", c.Name, name, err)
	}
	return s
}

func (c *vecCase) paramBool(name string) bool {
	c.t.Helper()
	var b bool
	if err := json.Unmarshal(c.raw("params", c.Params, name), &b); err != nil {
		c.t.Fatalf("%s: param %q: %v", c.Name, name, err)
	}
	return b
}

func (c *vecCase) aggMode(name string) AggMode {
	c.t.Helper()
	m, err := ParseAggMode(c.paramStr(name))
	if err != nil {
		c.t.Fatalf("%s: %v", c.Name, err)
	}
	return m
}

// expect compares an output of the case with got.
func (c *vecCase) expect(name string, got arr) {
	c.t.Helper()
	expectArr(c.t, c.tol, c.Name+" "+name, got, c.arr("outputs", c.Outputs, name))
}

// unused lists the fields of the case that the handler did not read.
func (c *vecCase) unused() []string {
	var out []string
	for kind, m := range map[string]map[string]json.RawMessage{"inputs": c.Inputs, "params": c.Params, "outputs": c.Outputs} {
		for k := range m {
			if !c.used[kind+"."+k] {
				out = append(out, kind+"."+k)
			}
		}
	}
	sort.Strings(out)
	return out
}

type vectorFileT struct {
	Tolerance tolerance  `json:"tolerance"`
	Cases     []*vecCase `json:"cases"`
}

func loadVectors(t *testing.T) vectorFileT {
	t.Helper()
	data, err := os.ReadFile(vectorFile)
	if err != nil {
		t.Fatalf("reading test vectors: %v", err)
	}
	var f vectorFileT
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("decoding %s: %v", vectorFile, err)
	}
	if f.Tolerance.Rel <= 0 || f.Tolerance.Abs <= 0 {
		t.Fatalf("%s: missing tolerance", vectorFile)
	}
	return f
}

// handlers maps a vector's fn to the test that consumes it.
var handlers = map[string]func(c *vecCase){
	"kl.k1":                           klCase,
	"kl.k2":                           klCase,
	"kl.k3":                           klCase,
	"kl.reward_penalty":               klRewardCase,
	"policy_loss.ppo":                 ppoCase,
	"policy_loss.gspo":                gspoCase,
	"policy_loss.cispo":               cispoCase,
	"policy_loss.importance_sampling": samplerLossCase,
	"policy_loss.dro":                 samplerLossCase,
	"policy_loss.pg":                  pgCase,
	"loss_agg.all_modes":              aggCase,
	"value_loss.clipped":              valueCase,
	"preference.dpo":                  pairCase,
	"preference.simpo":                pairCase,
	"preference.orpo":                 pairCase,
	"preference.kto":                  ktoCase,
	"preference.bradley_terry":        btCase,
	"distill.opd":                     opdCase,
	"distill.mixed_ce_k3":             mixedCase,
	"distill.beta_schedule":           betaScheduleCase,
	"distill.sft_ce":                  sftCase,
	"flow.rectified_flow_loss":        flowMatchingCase,
	"flow.sde_step_logprob":           sdeStepCase,
}

// TestVectors runs every case of sections B, C, D, E, F and H of the test
// vectors (KL, policy, value, preference, distillation and flow losses), and
// fails on any case or field it does not consume.
func TestVectors(t *testing.T) {
	f := loadVectors(t)
	consumed := 0
	for _, c := range f.Cases {
		if !strings.Contains(sectionsOwned, c.Section) || c.Section == "" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			h, ok := handlers[c.Fn]
			if !ok {
				t.Fatalf("no test consumes fn %q (section %s)", c.Fn, c.Section)
			}
			c.t, c.tol, c.used = t, f.Tolerance, map[string]bool{}
			h(c)
			if u := c.unused(); len(u) > 0 {
				t.Errorf("fields not consumed by the %s test: %v", c.Fn, u)
			}
		})
		consumed++
	}
	if consumed == 0 {
		t.Fatalf("no case of sections %s found in %s", sectionsOwned, vectorFile)
	}
	t.Logf("consumed %d cases of sections %s", consumed, sectionsOwned)
}

// ---- B ----

func klCase(c *vecCase) {
	est := KLEstimator(strings.TrimPrefix(c.Fn, "kl."))
	cfg := KLConfig{Estimator: est}
	if est == KLK3 {
		cfg.LogRatioClamp = c.param("logratio_clamp")
		cfg.OutputClamp = c.param("output_clamp")
	}
	r := Reducer{Mode: c.aggMode("agg")}
	out := runGraph(c.t, []arr{c.in("logp"), c.in("ref_logp"), c.in("mask")}, func(in []*Node) (graphOutputs, error) {
		res, err := KLLoss(in[0], in[1], in[2], cfg, r)
		if err != nil {
			return nil, err
		}
		return graphOutputs{"kl": res.Aux["kl"], "loss": res.Loss, "metric": res.Metrics["kl"],
			"grad": Gradient(res.Loss, in[0])[0]}, nil
	})
	c.expect("kl", out["kl"])
	c.expect("kl_token_mean", out["loss"])
	c.expect("kl_token_mean", out["metric"])
	c.expect("grad_logp_of_token_mean", out["grad"])
}

func klRewardCase(c *vecCase) {
	got, err := KLPenaltyRewards(c.in("token_scores").rows(), c.in("old_logp").rows(), c.in("ref_logp").rows(),
		c.param("kl_coef"), KLConfig{Estimator: KLEstimator(c.paramStr("estimator"))})
	if err != nil {
		c.t.Fatal(err)
	}
	c.expect("token_rewards", matrix(got))
}

// ---- C ----

// policyCase runs a policy loss on the shared fixture and checks the common outputs;
// extra names the additional Result entries (Aux or Metrics) to compare.
func policyCase(c *vecCase, sampler bool, loss func(b PolicyBatch, r Reducer) (Result, error), extra map[string]string) {
	r := Reducer{Mode: c.aggMode("loss_agg_mode"), LossScaleFactor: c.paramOr("loss_scale_factor", 0)}
	second := "old_logp"
	if sampler {
		second = "sampler_logp"
	}
	inputs := []arr{c.in("logp"), c.in("advantages"), c.in("mask")}
	if c.hasIn(second) {
		inputs = append(inputs, c.in(second))
	}
	out := runGraph(c.t, inputs, func(in []*Node) (graphOutputs, error) {
		b := PolicyBatch{LogProbs: in[0], Advantages: in[1], Mask: in[2]}
		if len(in) > 3 {
			if sampler {
				b.SamplerLogProbs = in[3]
			} else {
				b.OldLogProbs = in[3]
			}
		}
		res, err := loss(b, r)
		if err != nil {
			return nil, err
		}
		outs := graphOutputs{"loss": res.Loss, "grad_logp": Gradient(res.Loss, in[0])[0], "token_loss": res.Aux["token_loss"]}
		for want, have := range extra {
			n := res.Aux[have]
			if n == nil {
				n = res.Metrics[have]
			}
			if n == nil {
				return nil, fmt.Errorf("result has no %q", have)
			}
			outs[want] = n
		}
		return outs, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}

func ppoCase(c *vecCase) {
	cfg := PPOConfig{EpsLow: c.param("eps_low"), EpsHigh: c.param("eps_high"), LogRatioClamp: c.param("logratio_clamp"),
		DualClipC: c.paramOr("dual_clip_c", 0)}
	extra := map[string]string{"ratio": "ratio", "clipfrac": "clipfrac"}
	if c.hasOut("clipfrac_lower") {
		extra["clipfrac_lower"] = "clipfrac_lower"
	}
	policyCase(c, false, func(b PolicyBatch, r Reducer) (Result, error) { return PPO(b, cfg, r) }, extra)
}

func gspoCase(c *vecCase) {
	cfg := GSPOConfig{EpsLow: c.param("eps_low"), EpsHigh: c.param("eps_high"), SeqLogRatioMax: c.param("seq_logratio_max")}
	policyCase(c, false, func(b PolicyBatch, r Reducer) (Result, error) { return GSPO(b, cfg, r) },
		map[string]string{"seq_ratio": "seq_ratio", "clipfrac": "clipfrac"})
}

func cispoCase(c *vecCase) {
	cfg := CISPOConfig{ClipLow: c.param("clip_low"), ClipHigh: c.param("clip_high"), LogRatioClamp: c.param("logratio_clamp")}
	policyCase(c, false, func(b PolicyBatch, r Reducer) (Result, error) { return CISPO(b, cfg, r) },
		map[string]string{"clipped_ratio": "clipped_ratio", "clipfrac": "clipfrac"})
}

func samplerLossCase(c *vecCase) {
	if c.Fn == "policy_loss.dro" {
		beta := c.param("beta")
		policyCase(c, true, func(b PolicyBatch, r Reducer) (Result, error) { return DRO(b, beta, r) }, nil)
		return
	}
	policyCase(c, true, func(b PolicyBatch, r Reducer) (Result, error) { return ImportanceSampling(b, 0, r) },
		map[string]string{"ratio": "ratio"})
}

func pgCase(c *vecCase) {
	policyCase(c, false, PolicyGradient, nil)
}

// aggCase checks every mode's value and, independently, that its gradient w.r.t. the
// token loss is the aggregation weight w[b,t] computed here in float64.
func aggCase(c *vecCase) {
	tokenLoss, mask := c.in("token_loss"), c.in("mask")
	lsf := c.param("loss_scale_factor")
	out := runGraph(c.t, []arr{tokenLoss, mask}, func(in []*Node) (graphOutputs, error) {
		outs := graphOutputs{}
		for _, m := range AggModes() {
			l, err := Reducer{Mode: m, LossScaleFactor: lsf}.Reduce(in[0], in[1])
			if err != nil {
				return nil, err
			}
			outs[string(m)] = l
			outs["grad "+string(m)] = Gradient(l, in[0])[0]
		}
		return outs, nil
	})
	rows := mask.rows()
	counts := CountMask(rows)
	for _, m := range AggModes() {
		c.expect(strings.ReplaceAll(string(m), "-", "_"), out[string(m)])
		want := make([][]float64, len(rows))
		for b, row := range rows {
			want[b] = make([]float64, len(row))
			nb := 0.0
			for _, v := range row {
				nb += v
			}
			for t, v := range row {
				if v == 0 {
					continue
				}
				switch m {
				case AggTokenMean:
					want[b][t] = 1 / float64(counts.Tokens)
				case AggSeqMeanTokenSum:
					want[b][t] = 1 / float64(counts.Sequences)
				case AggSeqMeanTokenMean:
					want[b][t] = 1 / (float64(counts.Sequences) * nb)
				case AggSeqMeanTokenSumNorm:
					want[b][t] = 1 / (float64(counts.Rows) * lsf)
				case AggSum:
					want[b][t] = 1
				}
			}
		}
		expectArr(c.t, c.tol, c.Name+" weights "+string(m), out["grad "+string(m)], matrix(want))
	}
}

// ---- D ----

func valueCase(c *vecCase) {
	cfg := ValueConfig{ClipRange: c.param("cliprange_value")}
	r := Reducer{Mode: c.aggMode("loss_agg_mode")}
	out := runGraph(c.t, []arr{c.in("values"), c.in("old_values"), c.in("returns"), c.in("mask")},
		func(in []*Node) (graphOutputs, error) {
			res, err := ValueLoss(in[0], in[1], in[2], in[3], cfg, r)
			if err != nil {
				return nil, err
			}
			return graphOutputs{"loss": res.Loss, "grad_values": Gradient(res.Loss, in[0])[0],
				"token_loss": res.Aux["token_loss"], "clipfrac": res.Metrics["vf_clipfrac"]}, nil
		})
	for name := range out {
		c.expect(name, out[name])
	}
}

// ---- E ----

func pairCase(c *vecCase) {
	inputs := []arr{c.in("policy_chosen_logps"), c.in("policy_rejected_logps"), c.in("ref_chosen_logps"),
		c.in("ref_rejected_logps"), c.in("chosen_lengths"), c.in("rejected_lengths")}
	var loss func(b PairBatch) (Result, error)
	extra := map[string]string{}
	switch c.Fn {
	case "preference.dpo":
		cfg := DPOConfig{Type: DPOType(c.paramStr("loss_type")), Beta: c.param("beta"),
			LabelSmoothing: c.paramOr("label_smoothing", 0)}
		if c.hasParam("ipo_length_normalize") {
			cfg.IPOSummed = !c.paramBool("ipo_length_normalize")
		}
		loss = func(b PairBatch) (Result, error) { return DPO(b, cfg) }
		for _, k := range []string{"logits_h", "chosen_rewards", "rejected_rewards"} {
			if c.hasOut(k) {
				extra[k] = k
			}
		}
	case "preference.simpo":
		cfg := SimPOConfig{Beta: c.param("beta"), Gamma: c.param("gamma"), LabelSmoothing: c.param("label_smoothing")}
		loss = func(b PairBatch) (Result, error) { return SimPO(b, cfg) }
		extra["avg_chosen_logp"], extra["avg_rejected_logp"] = "avg_chosen_logp", "avg_rejected_logp"
	case "preference.orpo":
		lambda := c.param("lambda")
		loss = func(b PairBatch) (Result, error) { return ORPO(b, lambda) }
		extra["log_odds"], extra["nll_chosen"] = "log_odds", "nll_chosen"
	}
	out := runGraph(c.t, inputs, func(in []*Node) (graphOutputs, error) {
		res, err := loss(PairBatch{PolicyChosen: in[0], PolicyRejected: in[1], RefChosen: in[2], RefRejected: in[3],
			ChosenLengths: in[4], RejectedLengths: in[5]})
		if err != nil {
			return nil, err
		}
		grads := Gradient(res.Loss, in[0], in[1])
		outs := graphOutputs{"loss": res.Loss, "per_pair_loss": res.Aux["per_pair_loss"],
			"grad_policy_chosen_logps": grads[0], "grad_policy_rejected_logps": grads[1]}
		for want, have := range extra {
			outs[want] = res.Aux[have]
		}
		return outs, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}

func ktoCase(c *vecCase) {
	cfg := KTOConfig{Beta: c.param("beta"), DesirableWeight: c.param("desirable_weight"),
		UndesirableWeight: c.param("undesirable_weight")}
	out := runGraph(c.t, []arr{c.in("policy_logps"), c.in("ref_logps"), c.in("is_desirable"),
		c.in("kl_policy_logps"), c.in("kl_ref_logps")}, func(in []*Node) (graphOutputs, error) {
		res, err := KTO(KTOBatch{PolicyLogps: in[0], RefLogps: in[1], Desirable: in[2],
			KLPolicyLogps: in[3], KLRefLogps: in[4]}, cfg)
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "z0": res.Metrics["z0"], "per_example_loss": res.Aux["per_example_loss"],
			"grad_policy_logps": Gradient(res.Loss, in[0])[0]}, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}

func btCase(c *vecCase) {
	inputs := []arr{c.in("reward_chosen"), c.in("reward_rejected")}
	if c.hasIn("margin") {
		inputs = append(inputs, c.in("margin"))
	}
	out := runGraph(c.t, inputs, func(in []*Node) (graphOutputs, error) {
		b := RewardPairBatch{Chosen: in[0], Rejected: in[1]}
		if len(in) > 2 {
			b.Margin = in[2]
		}
		res, err := BradleyTerry(b, 0)
		if err != nil {
			return nil, err
		}
		grads := Gradient(res.Loss, in[0], in[1])
		return graphOutputs{"loss": res.Loss, "per_pair_loss": res.Aux["per_pair_loss"], "accuracy": res.Metrics["accuracy"],
			"grad_reward_chosen": grads[0], "grad_reward_rejected": grads[1]}, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}

// ---- F ----

func opdCase(c *vecCase) {
	if pl := c.paramStr("policy_loss"); pl != "importance_sampling" {
		c.t.Fatalf("opd vector uses policy loss %q; only importance_sampling is wired here", pl)
	}
	teacher, sampler, logp, mask := c.in("teacher_logp"), c.in("sampler_logp"), c.in("logp"), c.in("mask")
	adv, err := OPDAdvantages(teacher.rows(), sampler.rows(), mask.rows(), nil,
		OPDConfig{KLCoef: c.param("kl_coef"), Discount: c.param("discount")})
	if err != nil {
		c.t.Fatal(err)
	}
	c.expect("advantages", matrix(adv))
	kl, err := TeacherKL(teacher.rows(), sampler.rows(), mask.rows())
	if err != nil {
		c.t.Fatal(err)
	}
	c.expect("reverse_kl_token_mean", scalarArr(kl))
	out := runGraph(c.t, []arr{logp, sampler, matrix(adv), mask}, func(in []*Node) (graphOutputs, error) {
		b := PolicyBatch{LogProbs: in[0], SamplerLogProbs: in[1], Advantages: in[2], Mask: in[3]}
		sum, err := ImportanceSampling(b, 0, Reducer{Mode: AggSum})
		if err != nil {
			return nil, err
		}
		mean, err := ImportanceSampling(b, 0, Reducer{Mode: AggTokenMean})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"ratio": sum.Aux["ratio"], "loss_sum": sum.Loss, "grad_logp_sum": Gradient(sum.Loss, in[0])[0],
			"loss_token_mean": mean.Loss, "grad_logp_token_mean": Gradient(mean.Loss, in[0])[0]}, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}

func mixedCase(c *vecCase) {
	beta := c.param("beta")
	cfg := MixedCEK3Config{LogRatioClamp: c.param("k3_logratio_clamp"), OutputClamp: c.param("k3_output_clamp")}
	out := runGraph(c.t, []arr{c.in("student_logp_on_teacher_tokens"), c.in("teacher_exec_mask"),
		c.in("student_logp_on_student_tokens"), c.in("teacher_logp_on_student_tokens"), c.in("student_exec_mask")},
		func(in []*Node) (graphOutputs, error) {
			res, err := MixedCEK3(MixedBatch{StudentOnTeacher: in[0], TeacherMask: in[1], StudentOnStudent: in[2],
				TeacherOnStudent: in[3], StudentMask: in[4]}, Scalar(in[0].Graph(), in[0].DType(), beta), cfg)
			if err != nil {
				return nil, err
			}
			grads := Gradient(res.Loss, in[0], in[2])
			return graphOutputs{"loss": res.Loss, "ce_term": res.Metrics["ce"], "k3_term": res.Metrics["k3"],
				"k3_tokens": res.Aux["k3_tokens"], "grad_student_logp_on_teacher_tokens": grads[0],
				"grad_student_logp_on_student_tokens": grads[1]}, nil
		})
	for name := range out {
		c.expect(name, out[name])
	}
}

func betaScheduleCase(c *vecCase) {
	s := BetaSchedule{Start: c.param("beta_start"), End: c.param("beta_end"), DecayRollouts: int(c.param("decay_rollouts"))}
	idx := c.in("rollout_index")
	got := make([]float64, len(idx.data))
	for i, k := range idx.data {
		b, err := BetaAt(s, int(k))
		if err != nil {
			c.t.Fatal(err)
		}
		got[i] = b
	}
	c.expect("beta", vector(got))
}

func sftCase(c *vecCase) {
	out := runGraph(c.t, []arr{c.in("target_logp"), c.in("mask")}, func(in []*Node) (graphOutputs, error) {
		outs := graphOutputs{}
		for name, m := range map[string]AggMode{"loss_token_mean": AggTokenMean,
			"loss_seq_mean_token_mean": AggSeqMeanTokenMean, "loss_sum": AggSum} {
			res, err := SFT(in[0], in[1], Reducer{Mode: m})
			if err != nil {
				return nil, err
			}
			outs[name] = res.Loss
			if m == AggTokenMean {
				outs["grad_logp_token_mean"] = Gradient(res.Loss, in[0])[0]
			}
		}
		return outs, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}

// ---- H ----

func flowMatchingCase(c *vecCase) {
	out := runGraph(c.t, []arr{c.in("x_data"), c.in("noise"), c.in("sigma"), c.in("v_pred")},
		func(in []*Node) (graphOutputs, error) {
			xs, u, err := FlowInterpolate(in[0], in[1], in[2])
			if err != nil {
				return nil, err
			}
			res, err := RectifiedFlowLoss(in[3], u, nil)
			if err != nil {
				return nil, err
			}
			return graphOutputs{"x_sigma": xs, "target_velocity": u, "per_sample_loss": res.Aux["per_sample_loss"],
				"loss": res.Loss, "grad_v_pred": Gradient(res.Loss, in[3])[0]}, nil
		})
	for name := range out {
		c.expect(name, out[name])
	}
}

func sdeStepCase(c *vecCase) {
	x, v, xNext := c.in("x"), c.in("v"), c.in("x_next")
	// The vector is one sample of D dims; the API takes [N, D].
	d := len(x.data)
	cfg := SDEConfig{NoiseLevel: c.param("noise_level"), SigmaMax: 0.99}
	sigma, sigmaNext := c.param("sigma"), c.param("sigma_next")
	out := runGraph(c.t, []arr{x.reshape(1, d), v.reshape(1, d), xNext.reshape(1, d)}, func(in []*Node) (graphOutputs, error) {
		g := in[0].Graph()
		st, err := SDEStepLogProb(in[0], in[1], in[2], Scalar(g, in[0].DType(), sigma), Scalar(g, in[0].DType(), sigmaNext), cfg)
		if err != nil {
			return nil, err
		}
		return graphOutputs{"mean": Reshape(st.Mean, d), "std": st.Std, "sigma_t": st.SigmaT,
			"logp_mean_over_dims": Reshape(st.LogProb), "logp_sum_over_dims": Reshape(st.LogProbSum)}, nil
	})
	for name := range out {
		c.expect(name, out[name])
	}
}
