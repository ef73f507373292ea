package specializations

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations/loss"
)

func init() {
	MustRegister(Contract{
		Name: "dpo", Data: DataPreference,
		Doc: "DPO family: sigmoid, cDPO, hinge, IPO (Rafailov et al., 2023; Azar et al., 2023)",
		Requires: func(c RoleConfig) []string {
			return trainOnly(c, lmForward, rollout.KeyChosen, rollout.KeyRefLogProbs)
		},
		Produces: func(c RoleConfig) []string { return withRef(c, rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newPairwise("dpo", c, dpoTerms) },
	})
	MustRegister(Contract{
		Name: "simpo", Data: DataPreference,
		Doc:      "SimPO: reference-free length-normalised margin (Meng et al., 2024)",
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyChosen) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newPairwise("simpo", c, oneTerm(loss.TermSimPO)) },
	})
	MustRegister(Contract{
		Name: "orpo", Data: DataPreference,
		Doc:      "ORPO: chosen NLL plus odds-ratio term (Hong et al., 2024)",
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyChosen) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newPairwise("orpo", c, oneTerm(loss.TermORPO)) },
	})
	MustRegister(Contract{
		Name: "kto", Data: DataKTO,
		Doc: "KTO: desirable/undesirable examples against a KL baseline (Ethayarajh et al., 2024)",
		Requires: func(c RoleConfig) []string {
			return trainOnly(c, lmForward, rollout.KeyLabel, rollout.KeyRefLogProbs)
		},
		Produces: func(c RoleConfig) []string { return withRef(c, rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newKTO(c) },
	})
	MustRegister(Contract{
		Name: "reward_model", Data: DataPreference, ValueHead: true,
		Doc:      "Bradley–Terry reward model with a scalar head (Ouyang et al., 2022)",
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyChosen) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyRewards) },
		New:      func(c RoleConfig) (Specialization, error) { return newRewardModel(c) },
	})
}

// Preference data: a pair is two consecutive rows (2i, 2i+1) of one prompt, one with
// chosen = 1 and the other with chosen = 0 (in either order). Micro-batches hold whole
// pairs; the pair count of the whole mini-batch is a batch input, so the micro-batch
// losses add up to the mini-batch mean (loss = mean over pairs, as in TRL).

// pairwise is the DPO family and its reference-free relatives on preference pairs: a
// composed loss Σ w_k·L_k of terms (loss.Preference). dpo takes its terms from the recipe
// (dpo_loss_type with dpo_loss_weights: sigmoid, cDPO with label_smoothing, hinge, ipo, sft,
// so RPO and DPO+SFT mixes are recipes), simpo and orpo are one term each (Rafailov et al.,
// 2023; Azar et al., 2023; Meng et al., 2024; Hong et al., 2024; Pang et al., 2024).
// Metrics: those of its terms (accuracy, margins, chosen_rewards, rejected_rewards for the
// DPO terms; accuracy for simpo and orpo; nll_loss for sft) and loss_<term> when several.
type pairwise struct {
	lmBase
	pref    loss.PreferenceConfig
	withRef bool // a term reads the reference log-probs
}

// pairTermsOf gives a pairwise specialization's weighted terms from its role's knobs.
type pairTermsOf func(schema.Knobs) ([]loss.WeightedTerm, error)

// dpoTerms are the recipe's dpo_loss_type terms with their dpo_loss_weights.
func dpoTerms(k schema.Knobs) ([]loss.WeightedTerm, error) {
	names := []string(k.DPOLossType)
	if len(names) == 0 {
		names = []string{string(loss.TermSigmoid)}
	}
	return loss.Terms(names, k.DPOLossWeights)
}

// oneTerm is a specialization whose loss is a single fixed term.
func oneTerm(t loss.PairTerm) pairTermsOf {
	return func(schema.Knobs) ([]loss.WeightedTerm, error) { return []loss.WeightedTerm{{Term: t, Weight: 1}}, nil }
}

// newPairwise builds the pairwise specialization registered as name with the terms of terms.
func newPairwise(name string, cfg RoleConfig, terms pairTermsOf) (*pairwise, error) {
	b, err := newLMBase(name, cfg)
	if err != nil {
		return nil, err
	}
	ts, err := terms(cfg.Knobs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b.noEmptyUnits = true // an empty pair's loss is −log σ(0), not 0
	k := cfg.Knobs
	p := &pairwise{lmBase: b, pref: loss.PreferenceConfig{Terms: ts,
		DPO:   loss.DPOConfig{Beta: k.Beta, LabelSmoothing: k.LabelSmoothing, IPOSummed: !k.IPOLengthNormalize},
		SimPO: loss.SimPOConfig{Beta: k.Beta, Gamma: k.SimPOGamma}, ORPOLambda: k.ORPOLambda}}
	for _, t := range ts {
		p.withRef = p.withRef || t.Term.NeedsReference()
	}
	return p, nil
}

// checkPairs verifies that rows form (chosen, rejected) pairs.
func checkPairs(name string, data *rollout.Rollout) error {
	if data.Len()%2 != 0 {
		return fmt.Errorf("%s: %d rows do not form pairs", name, data.Len())
	}
	ch := data.Row[rollout.KeyChosen]
	for i := 0; i < len(ch); i += 2 {
		if !((ch[i] == 1 && ch[i+1] == 0) || (ch[i] == 0 && ch[i+1] == 1)) {
			return fmt.Errorf("%s: rows %d and %d are not a chosen/rejected pair (chosen = %g, %g)", name, i, i+1, ch[i], ch[i+1])
		}
	}
	return nil
}

// pairBatches are the micro-batches of preference pairs: forward keys, chosen flags, the
// pair count, and the per-token keys listed in tok (e.g. ref_log_probs).
func (b lmBase) pairBatches(data *rollout.Rollout, opts BatchOptions, tok ...string) ([]map[string]*tensors.Tensor, error) {
	if err := b.requires(data); err != nil {
		return nil, err
	}
	if err := checkPairs(b.contract.Name, data); err != nil {
		return nil, err
	}
	mbs, err := b.lmBatches(data, opts, 2, func(mb map[string]*tensors.Tensor, rows []int) error {
		T := mb[bTokens].Shape().Dimensions[1]
		mb[rollout.KeyChosen] = rowValues(data.Row[rollout.KeyChosen], rows)
		for _, k := range tok {
			mb[k] = shiftedTok(data.Tok[k], rows, T)
		}
		return nil
	})
	setScalar(mbs, bCount, float64(data.Len()/2))
	setScalar(mbs, bChosenTokens, float64(chosenTokens(data)))
	return mbs, err
}

// chosenTokens counts the target tokens of the chosen rows: the denominator of the sft
// term's token mean over the whole mini-batch.
func chosenTokens(data *rollout.Rollout) int {
	var chosen []int
	for i, c := range data.Row[rollout.KeyChosen] {
		if c == 1 {
			chosen = append(chosen, i)
		}
	}
	return loss.CountMask(shiftedMasks(data.Mask, chosen)).Tokens
}

// PrepareBatch reads tokens, loss_mask, chosen and, when a term needs them, ref_log_probs.
func (p *pairwise) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if !p.cfg.Role.Trainable {
		return p.forwardBatches(data, opts, 1)
	}
	if p.withRef {
		return p.pairBatches(data, opts, rollout.KeyRefLogProbs)
	}
	return p.pairBatches(data, opts)
}

// splitPairs turns per-row values [2P] into chosen and rejected vectors [P] with the
// batch's chosen flags: products with one-hot flags, not slices, so gradients flow
// through SimpleGo.
func splitPairs(x, chosen *Node) (c, r *Node) {
	n := x.Shape().Dimensions[0]
	x2 := Reshape(x, n/2, 2)
	f := Reshape(StopGradient(ConvertDType(chosen, x.DType())), n/2, 2)
	return ReduceSum(Mul(x2, f), 1), ReduceSum(Mul(x2, OneMinus(f)), 1)
}

// pairBatch builds loss.PairBatch from the policy's per-token log-probs.
func pairBatch(lp *Node, batch Batch, withRef bool) (loss.PairBatch, error) {
	sum, n, err := loss.SequenceLogProbs(lp, batch[bLossMask])
	if err != nil {
		return loss.PairBatch{}, err
	}
	pb := loss.PairBatch{Count: batch[bCount], ChosenTokens: batch[bChosenTokens]}
	pb.PolicyChosen, pb.PolicyRejected = splitPairs(sum, batch[rollout.KeyChosen])
	pb.ChosenLengths, pb.RejectedLengths = splitPairs(n, batch[rollout.KeyChosen])
	if withRef {
		ref, _, err := loss.SequenceLogProbs(batch[rollout.KeyRefLogProbs], batch[bLossMask])
		if err != nil {
			return loss.PairBatch{}, err
		}
		pb.RefChosen, pb.RefRejected = splitPairs(ref, batch[rollout.KeyChosen])
	}
	return pb, nil
}

// ComputeLoss is the composed preference loss of the specialization's terms.
func (p *pairwise) ComputeLoss(out Output, batch Batch, _ loss.Reducer) (*Node, map[string]*Node, error) {
	pb, err := pairBatch(out[rollout.KeyLogProbs], batch, p.withRef)
	if err != nil {
		return nil, nil, err
	}
	res, err := loss.Preference(pb, p.pref)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}

// kto is Kahneman–Tversky optimisation on single examples labelled desirable (label 1) or
// undesirable (label 0) (KTO, Ethayarajh et al., 2024). Its KL baseline z0 comes from the rollout's
// mismatched rows, label −1: a prompt with another example's completion (see
// AddKTOMismatched), whose ref_log_probs the reference role produces with the rest. z0
// is estimated per micro-batch from the micro-batch's mismatched rows (trl estimates it
// per batch). Metrics: z0, accuracy (labelled examples whose policy−reference log-ratio has
// the sign of their label).
type kto struct{ lmBase }

// newKTO builds the kto specialization.
func newKTO(cfg RoleConfig) (*kto, error) {
	b, err := newLMBase("kto", cfg)
	b.fixedRows = true // z0 is the micro-batch's: packing must not regroup its rows
	return &kto{b}, err
}

// PrepareBatch reads tokens, loss_mask, label and ref_log_probs.
func (s *kto) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := s.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	examples := 0
	for _, l := range data.Row[rollout.KeyLabel] {
		if l >= 0 {
			examples++
		}
	}
	mbs, err := s.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		T := mb[bTokens].Shape().Dimensions[1]
		mb[rollout.KeyLabel] = rowValues(data.Row[rollout.KeyLabel], rows)
		mb[rollout.KeyRefLogProbs] = shiftedTok(data.Tok[rollout.KeyRefLogProbs], rows, T)
		return nil
	})
	setScalar(mbs, bCount, float64(examples))
	return mbs, err
}

// ComputeLoss is the KTO loss: mean over the examples of the mini-batch.
func (s *kto) ComputeLoss(out Output, batch Batch, _ loss.Reducer) (*Node, map[string]*Node, error) {
	k := s.cfg.Knobs
	p, _, err := loss.SequenceLogProbs(out[rollout.KeyLogProbs], batch[bLossMask])
	if err != nil {
		return nil, nil, err
	}
	ref, _, err := loss.SequenceLogProbs(batch[rollout.KeyRefLogProbs], batch[bLossMask])
	if err != nil {
		return nil, nil, err
	}
	label := ConvertDType(batch[rollout.KeyLabel], p.DType())
	zero := ZerosLike(label)
	isKL := StopGradient(Where(LessThan(label, zero), OnesLike(label), zero))
	isExample := OneMinus(isKL)
	nKL := ReduceAllSum(isKL)
	klMean := Div(ReduceAllSum(Mul(Sub(p, ref), isKL)), Max(nKL, OnesLike(nKL)))
	z0 := StopGradient(MaxScalar(klMean, 0))
	res, err := loss.KTO(loss.KTOBatch{PolicyLogps: p, RefLogps: ref, Desirable: GreaterThan(label, MulScalar(OnesLike(label), 0.5)),
		Z0: z0}, loss.KTOConfig{Beta: k.Beta, DesirableWeight: k.KTODesirableWeight, UndesirableWeight: k.KTOUndesirableWeight})
	if err != nil {
		return nil, nil, err
	}
	// loss.KTO averages over every row; only the labelled examples count.
	count := ConvertDType(batch[bCount], p.DType())
	l := Div(ReduceAllSum(Mul(res.Aux["per_example_loss"], isExample)), Max(count, OnesLike(count)))
	// accuracy: the share of labelled examples whose implicit reward p − ref has the sign of
	// their label (positive for desirable, negative for undesirable completions).
	diff := Sub(p, ref)
	right := Or(And(GreaterThan(label, MulScalar(OnesLike(label), 0.5)), GreaterThan(diff, ZerosLike(diff))),
		And(Equal(label, zero), LessThan(diff, ZerosLike(diff))))
	hits := Mul(StopGradient(ConvertDType(right, p.DType())), isExample)
	acc := Div(ReduceAllSum(hits), Max(count, OnesLike(count)))
	return l, map[string]*Node{"z0": z0, "accuracy": acc}, nil
}

// AddKTOMismatched returns data with one mismatched row per labelled example appended:
// example i's prompt followed by the completion of the next example (cyclically, trl's
// shift by one), label −1, loss mask 1 on the completion. Call it before the reference
// role produces ref_log_probs. Per-token columns other than the mask are zero on the new
// rows and per-row columns are 0; string columns copy the prompt's row.
func AddKTOMismatched(data *rollout.Rollout) (*rollout.Rollout, error) {
	if data.PromptLen == nil || data.Mask == nil || data.Row[rollout.KeyLabel] == nil {
		return nil, fmt.Errorf("kto mismatched rows: need prompt_len, loss_mask and label columns")
	}
	var ex []int
	for i, l := range data.Row[rollout.KeyLabel] {
		if l >= 0 {
			ex = append(ex, i)
		}
	}
	if len(ex) < 2 {
		return nil, fmt.Errorf("kto mismatched rows: need at least two labelled examples, have %d", len(ex))
	}
	out := shallowCopy(data)
	add := &rollout.Rollout{}
	for j, i := range ex {
		o := ex[(j+1)%len(ex)]
		p, po := data.PromptLen[i], data.PromptLen[o]
		tok := append(append([]int32{}, data.Tokens[i][:p]...), data.Tokens[o][po:]...)
		mask := make([]float32, len(tok))
		for t := p; t < len(tok); t++ {
			mask[t] = 1
		}
		add.Tokens = append(add.Tokens, tok)
		add.Mask = append(add.Mask, mask)
		add.PromptLen = append(add.PromptLen, p)
		for _, c := range []struct {
			dst *[]string
			src []string
		}{{&out.GroupID, data.GroupID}, {&out.TaskID, data.TaskID}, {&out.Role, data.Role}, {&out.DataSource, data.DataSource}} {
			if c.src != nil {
				*c.dst = append(*c.dst, c.src[i])
			}
		}
		if data.Traj != nil {
			out.Traj = append(out.Traj, len(data.Tokens)+j)
		}
		if data.Reward != nil {
			out.Reward = append(out.Reward, 0)
		}
	}
	out.Tokens = append(append([][]int32{}, data.Tokens...), add.Tokens...)
	out.Mask = append(append([][]float32{}, data.Mask...), add.Mask...)
	out.PromptLen = append(append([]int{}, data.PromptLen...), add.PromptLen...)
	for k, col := range data.Tok {
		c := append([][]float32{}, col...)
		for _, t := range add.Tokens {
			c = append(c, make([]float32, len(t)))
		}
		out.Tok[k] = c
	}
	for k, col := range data.Row {
		c := append([]float64{}, col...)
		for range add.Tokens {
			v := 0.0
			if k == rollout.KeyLabel {
				v = -1
			}
			c = append(c, v)
		}
		out.Row[k] = c
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("kto mismatched rows: %w", err)
	}
	return out, nil
}

// rewardModel is a Bradley–Terry reward model on preference pairs: the reward of a row is
// its value head at the last token, ℓ = −log σ(r_c − r_r − m) (+ reward centering)
// (Bradley–Terry, as in Ouyang et al., 2022). It produces rewards (one per row) for a reward role. The model needs
// a value head (runtime.Model.AddValueHead). Metric: accuracy.
type rewardModel struct{ lmBase }

// newRewardModel builds the reward_model specialization.
func newRewardModel(cfg RoleConfig) (*rewardModel, error) {
	b, err := newLMBase("reward_model", cfg)
	b.noEmptyUnits = true // an empty pair's Bradley–Terry loss is log 2, not 0
	return &rewardModel{b}, err
}

// PrepareBatch reads tokens, loss_mask and chosen.
func (s *rewardModel) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if !s.cfg.Role.Trainable {
		return s.forwardBatches(data, opts, 1)
	}
	return s.pairBatches(data, opts)
}

// rowRewards is the value head at each row's last real token, [R].
func rowRewards(ctx *context.Context, m *runtime.Model, batch Batch) (*Node, error) {
	v, err := values(ctx, m, batch)
	if err != nil {
		return nil, err
	}
	return ReduceSum(Mul(v, ConvertDType(batch[bLastToken], v.DType())), -1), nil
}

// ExtractModelOutput is the per-row reward.
func (s *rewardModel) ExtractModelOutput(ctx *context.Context, m *runtime.Model, batch Batch) (Output, error) {
	r, err := rowRewards(ctx, m, batch)
	if err != nil {
		return nil, fmt.Errorf("reward_model: %w", err)
	}
	return Output{rollout.KeyRewards: r}, nil
}

// ComputeLoss is the Bradley–Terry loss with margin rm_margin and center_rewards_coef.
func (s *rewardModel) ComputeLoss(out Output, batch Batch, _ loss.Reducer) (*Node, map[string]*Node, error) {
	rc, rr := splitPairs(out[rollout.KeyRewards], batch[rollout.KeyChosen])
	b := loss.RewardPairBatch{Chosen: rc, Rejected: rr, Count: batch[bCount]}
	if m := s.cfg.Knobs.RMMargin; m != 0 {
		b.Margin = AddScalar(ZerosLike(rc), m)
	}
	res, err := loss.BradleyTerry(b, s.cfg.Knobs.CenterRewardsCoef)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}

// Produce is the forward-only reward of every row.
func (s *rewardModel) Produce() runtime.OutputFn {
	return func(ctx *context.Context, m *runtime.Model, batch map[string]*Node) map[string]*Node {
		r, err := rowRewards(ctx, m, batch)
		if err != nil {
			panic(fmt.Errorf("reward_model: %w", err))
		}
		return map[string]*Node{rollout.KeyRewards: r}
	}
}
