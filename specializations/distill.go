package specializations

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations/loss"
)

func init() {
	MustRegister(Contract{
		Name: "opd", Data: DataRL, Estimator: true, TISCap: true,
		Doc: "on-policy distillation: teacher−student log-prob gaps as precomputed advantages (Agarwal et al., 2024; Lu et al., 2025)",
		Requires: func(c RoleConfig) []string {
			extra := []string{rollout.KeySamplerLogProbs, rollout.KeyTeacherLogProbs}
			if !UsesPrecomputedAdvantages(c) {
				extra = append(extra, rollout.KeyRewards)
				if estimators.NeedsOf(c.Knobs.EstimatorFor(c.Role.Name)).Values {
					extra = append(extra, rollout.KeyValues)
				}
			}
			return withTIS(c, trainOnly(c, lmForward, extra...))
		},
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newOPD(c) },
	})
	precomputedSources["opd"] = true
	MustRegister(Contract{
		Name: "gkd", Data: DataRL, TeacherBatches: true,
		Doc:      "GKD: generalized JSD to the teacher's full distribution (Agarwal et al., 2024)",
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyTeacherLogits) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs, rollout.KeyLogits) },
		New:      func(c RoleConfig) (Specialization, error) { return newGKD(c) },
	})
	MustRegister(Contract{
		Name: "dagger", Data: DataRL,
		Doc:      "DAgger: cross-entropy on the teacher's labels at the student's states (Ross et al., 2011)",
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyTeacherActions) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs, rollout.KeyActions) },
		New:      func(c RoleConfig) (Specialization, error) { return newDAgger(c) },
	})
	MustRegister(Contract{
		Name: "aggrevate", Data: DataRL, CandidateActions: true, Teacher: true, TeacherReward: true,
		Doc:      "AggreVaTe: imitation weighted by the expert's cost-to-go (Ross & Bagnell, 2014)",
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyRewards) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newAggreVaTe(c) },
	})
	MustRegister(Contract{
		Name: "mixed_loss_dagger_opd", Data: DataImitation, Teacher: true,
		Doc: "β-blend of CE on teacher-executed and K3 on student-executed tokens (stx's own blend of SFT and K3, Schulman, 2020)",
		Requires: func(c RoleConfig) []string {
			return trainOnly(c, lmForward, rollout.KeyExecutedBy, rollout.KeyTeacherLogProbs)
		},
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newMixedDaggerOPD(c) },
	})
}

// precomputedSources are the specializations whose roles compute per-token advantages
// themselves (ALGORITHMS.md A.8, "precomputed"), which use_precomputed_advantage selects
// over the estimator; each registers itself next to its contract. stx's workflow protocol
// carries no step advantages, so a task.workflow adds no source.
var precomputedSources = map[string]bool{}

// PrecomputedAdvantageSource reports whether role supplies precomputed advantages (A.8): it
// is trainable and its specialization computes them (opd: the teacher−student log-prob
// gaps). In a recipe with use_precomputed_advantage and no such role the knob has nothing to
// select and changes nothing: its estimator roles run their estimator as if it were false.
func PrecomputedAdvantageSource(role schema.Role) bool {
	return role.Trainable && precomputedSources[role.Specialization]
}

// UsesPrecomputedAdvantages reports whether the role trains on the advantages it supplies,
// with no estimator running (A.8): a PrecomputedAdvantageSource with
// use_precomputed_advantage. Such a role does not read knobs.estimator, nor the rewards.
func UsesPrecomputedAdvantages(c RoleConfig) bool {
	return PrecomputedAdvantageSource(c.Role) && c.Knobs.UsePrecomputedAdvantage
}

// opd is on-policy distillation (Agarwal et al., 2024; ALGORITHMS.md F.2): the student
// samples, the teacher scores the same tokens, and the teacher−student log-prob gaps become
// precomputed per-token advantages A_t = Σ_j γ^{j−t}·κ(lt_j − ls_j) — with
// use_precomputed_advantage; without it the configured estimator (knobs.estimator, e.g.
// grpo) turns the task's trajectory rewards into the advantages instead (A.8, rLLM's
// behaviour: a warning, once, says the gaps were overwritten).
//
// The loss is policy_loss (section C) against the rollout policy: ρ = exp(logp − ls), with
// ls the sampler's log-probs, which are the old_log_probs of every pass over one rollout
// (the sampler's weights are those the rollout's first pass started from). tinker's OPD
// trains importance_sampling (C.4, ρ unclipped) for one pass; with num_train_passes > 1 the
// later passes are off-policy, ρ drifts from 1, and C.4's −ρ·A lets a token whose ratio has
// grown push it further without bound. The catalog's opd therefore trains ppo (C.1):
// ℓ = max(−A·ρ, −A·clip(ρ, 1 − clip_ratio_low, 1 + clip_ratio_high)), the trust region of
// PPO for the passes that reuse a rollout (as slime's OPD, which adds the gaps to PPO's
// advantages). Where ρ = 1 (the first pass: the weights are the sampler's) C.1 and C.4 have
// the same value −A and the same gradient −A·∇logp. loss_agg_mode reduces it (tinker: sum).
// Metric: teacher_kl (Σ mask·(ls − lt) / N), and the loss's ratio statistics.
type opd struct {
	lmBase
	policy string
	warn   sync.Once // the overwrite warning of ComputeAdvantages, returned once
}

// newOPD builds the opd specialization.
func newOPD(cfg RoleConfig) (*opd, error) {
	b, err := newLMBase("opd", cfg)
	if err != nil {
		return nil, err
	}
	b.tempered = true
	s := &opd{lmBase: b}
	if s.policy, err = policyLossOf("opd", cfg.Knobs); err != nil {
		return nil, err
	}
	if err := validateClipBounds("opd", s.policy, cfg.Knobs); err != nil {
		return nil, err
	}
	return s, nil
}

// Batch keys of the distillation specializations.
const (
	bTeacherMask   = "teacher_mask"   // CE + K3 blend: trainable tokens of teacher-executed rows
	bStudentMask   = "student_mask"   // CE + K3 blend: trainable tokens of student-executed rows
	bTeacherTokens = "den_teacher"    // CE + K3 blend: Σ m^𝒯 of the mini-batch
	bStudentTokens = "den_student"    // CE + K3 blend: Σ m^𝒮 of the mini-batch
	bBeta          = "beta"           // CE + K3 blend: β of this rollout
	bCosts         = "costs"          // AggreVaTe: cost-to-go of each candidate row
	bTeacherIDs    = "teacher_labels" // DAgger: the teacher's token at each target position
)

// gaps are OPD's precomputed per-token advantages of the rows (F.2): loss.OPDAdvantages of
// the teacher's and the sampler's log-probs over the loss mask, with κ = kl_penalty_coef and
// γ_kl = kl_discount_factor, narrowed to float32.
func (s *opd) gaps(teacher, sampler, mask [][]float32) ([][]float32, error) {
	k := s.cfg.Knobs
	adv, err := loss.OPDAdvantages(tokToFloat64(teacher), tokToFloat64(sampler), tokToFloat64(mask), nil,
		loss.OPDConfig{KLCoef: k.KLPenaltyCoef, Discount: k.KLDiscountFactor})
	if err != nil {
		return nil, fmt.Errorf("opd: %w", err)
	}
	adv32 := make([][]float32, len(adv))
	for b, row := range adv {
		adv32[b] = make([]float32, len(row))
		for t, v := range row {
			adv32[b][t] = float32(v)
		}
	}
	return adv32, nil
}

// ComputeAdvantages sets data's advantages column (A.8). With use_precomputed_advantage they
// are OPD's teacher−student gaps, used as they are (no estimator, no normalisation). Without
// it the configured estimator runs over the rollout's trajectory rewards (groups by GroupID),
// and the first call warns that the gaps were overwritten; the estimator "precomputed" is the
// exception, whose supplied advantages are the gaps. data must hold the whole rollout (the
// engine's call, before mini-batches): group estimators need every row of a group.
func (s *opd) ComputeAdvantages(data *rollout.Rollout) ([]string, error) {
	cfg := estimatorConfig(s.cfg)
	if UsesPrecomputedAdvantages(s.cfg) || cfg.Name == estimators.Precomputed {
		if err := requireKeys("opd", data, []string{rollout.KeyTeacherLogProbs, rollout.KeySamplerLogProbs, rollout.KeyLossMask}); err != nil {
			return nil, err
		}
		gaps, err := s.gaps(data.Tok[rollout.KeyTeacherLogProbs], data.Tok[rollout.KeySamplerLogProbs], data.Mask)
		if err != nil {
			return nil, err
		}
		if err := data.SetTok(rollout.KeyAdvantages, gaps); err != nil {
			return nil, fmt.Errorf("opd: %w", err)
		}
		if UsesPrecomputedAdvantages(s.cfg) {
			return nil, nil // A.8: used as they are
		}
	}
	warns, err := estimators.RolloutAdvantages(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("opd: %w", err)
	}
	if cfg.Name != estimators.Precomputed {
		s.warn.Do(func() {
			warns = append(warns, fmt.Sprintf("opd's precomputed advantages (the teacher−student log-prob gaps) are overwritten "+
				"by estimator %s on the trajectory rewards: use_precomputed_advantage is false", cfg.Name))
		})
	}
	return warns, nil
}

// PrepareBatch reads tokens, loss_mask, sampler_log_probs, teacher_log_probs and the
// advantages (through ComputeAdvantages, unless the rollout already holds them), and the
// policy loss's clip bounds.
func (s *opd) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := s.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	if _, ok := data.Tok[rollout.KeyAdvantages]; !ok {
		data = shallowCopy(data)
		if _, err := s.ComputeAdvantages(data); err != nil {
			return nil, err
		}
	}
	mbs, err := s.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		T := mb[bTokens].Shape().Dimensions[1]
		mb[rollout.KeySamplerLogProbs] = shiftedTok(data.Tok[rollout.KeySamplerLogProbs], rows, T)
		mb[rollout.KeyTeacherLogProbs] = shiftedTok(data.Tok[rollout.KeyTeacherLogProbs], rows, T)
		mb[rollout.KeyAdvantages] = shiftedTok(data.Tok[rollout.KeyAdvantages], rows, T)
		addOldLogProbs(mb, data, rows, T, s.cfg.Knobs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for key, v := range clipBounds(s.policy, s.cfg.Knobs) {
		setScalar(mbs, key, v)
	}
	return mbs, nil
}

// ComputeLoss is policy_loss on the advantages, against the rollout policy's log-probs.
func (s *opd) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	mask := batch[bLossMask]
	sampler := batch[rollout.KeySamplerLogProbs]
	res, err := policyLoss("opd", s.policy, s.cfg.Knobs, loss.PolicyBatch{LogProbs: out[rollout.KeyLogProbs], OldLogProbs: sampler,
		SamplerLogProbs: sampler, Advantages: batch[rollout.KeyAdvantages], Mask: mask}, batch, r)
	if err != nil {
		return nil, nil, err
	}
	gap := Mul(Sub(sampler, batch[rollout.KeyTeacherLogProbs]), mask)
	n := tokenCount(batch)
	res.Metrics["teacher_kl"] = Div(ReduceAllSum(gap), Max(n, OnesLike(n)))
	return res.Loss, res.Metrics, nil
}

// tokenCount is the mini-batch's N from the batch (or the micro-batch's own).
func tokenCount(batch Batch) *Node {
	if n := batch[bDenTokens]; n != nil {
		return n
	}
	return ReduceAllSum(batch[bLossMask])
}

// gkd is generalized knowledge distillation: the generalized JSD between the student's and
// the teacher's full next-token distributions at every trainable position (Agarwal et al.,
// 2024; β = gkd_beta, τ = gkd_temperature), reduced with loss_agg_mode (token-mean is
// trl's "batchmean"). The teacher's logits arrive as a wide per-token column
// (teacher_logits/0 … teacher_logits/V−1, see SetTokenVectors); with gkd_teacher_top_k = k
// > 0 that column is the teacher's top-k summary instead, 2k+1 wide (loss.TeacherTopK: its k
// log-probs, the rest's log-mass, the k ids), and the divergence is over those k+1 buckets
// (ALGORITHMS.md F.3 states the bias). Mixing on-policy and dataset batches (gkd_lambda) is
// the rollout side's concern.
type gkd struct {
	lmBase
	topK int // gkd_teacher_top_k: 0 exact, else the teacher's summary of k tokens
}

// newGKD builds the gkd specialization.
func newGKD(cfg RoleConfig) (*gkd, error) {
	b, err := newLMBase("gkd", cfg)
	if err == nil && cfg.Knobs.GKDTeacherTopK < 0 {
		err = fmt.Errorf("gkd: gkd_teacher_top_k must be >= 0, got %d", cfg.Knobs.GKDTeacherTopK)
	}
	return &gkd{lmBase: b, topK: cfg.Knobs.GKDTeacherTopK}, err
}

// teacherWidth is the width of the teacher's column for a vocabulary: V, or the top-k
// summary's 2k+1.
func (s *gkd) teacherWidth(vocab int) int {
	if s.topK > 0 {
		return loss.TopKSummaryWidth(s.topK)
	}
	return vocab
}

// PrepareBatch reads tokens, loss_mask and teacher_logits.
func (s *gkd) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := s.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	return s.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		mb[rollout.KeyTeacherLogits] = shiftedWide(data, rollout.KeyTeacherLogits, rows, mb[bTokens].Shape().Dimensions[1])
		return nil
	})
}

// outTokenJSD is the Output key of GKD's per-token divergence.
const outTokenJSD = "token_jsd"

// gkdConfig is the divergence's β and τ from the role's knobs.
func (s *gkd) gkdConfig() loss.GKDConfig {
	return loss.GKDConfig{Beta: s.cfg.Knobs.GKDBeta, Temperature: s.cfg.Knobs.GKDTemperature}
}

// ExtractModelOutput is the student's log-probs of the target tokens and its generalized JSD
// to the teacher's logits at every position, from one chunked pass over the vocabulary (the
// student's [R,T,V] logits never exist whole).
func (s *gkd) ExtractModelOutput(ctx *context.Context, m *runtime.Model, batch Batch) (Output, error) {
	if err := s.checkInputs(batch); err != nil {
		return nil, err
	}
	teacher := batch[rollout.KeyTeacherLogits]
	if teacher == nil {
		return nil, fmt.Errorf("gkd: the batch has no %s", rollout.KeyTeacherLogits)
	}
	td := batch[bTokens].Shape().Dimensions
	V := m.Config.VocabSize
	if want := []int{td[0], td[1], s.teacherWidth(V)}; teacher.Rank() != 3 || teacher.Shape().Dimensions[0] != want[0] ||
		teacher.Shape().Dimensions[1] != want[1] || teacher.Shape().Dimensions[2] != want[2] {
		if s.topK > 0 {
			return nil, fmt.Errorf("gkd: the teacher's column is %s, want %v: the teacher's top-%d summary (gkd_teacher_top_k)",
				teacher.Shape(), want, s.topK)
		}
		return nil, fmt.Errorf("gkd: student logits %v and teacher logits %s differ (same vocabulary needed)",
			want, teacher.Shape())
	}
	cfg := s.gkdConfig()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if s.topK >= V {
		return nil, fmt.Errorf("gkd: gkd_teacher_top_k %d must be below the vocabulary's %d tokens", s.topK, V)
	}
	var outs []*Node
	if s.topK > 0 {
		// The target log-probs come from the divergence's own pass over the vocabulary.
		outs = perPosition(ctx, m, batch, []*Node{batch[bTargets], teacher}, func(h *Node, in []*Node) []*Node {
			return m.Head(ctx, h, in, func(z *Node, rows []*Node) []*Node {
				d, lp, _ := loss.GeneralizedJSDTopKAndLogProbs(z, rows[1], rows[0], s.topK, cfg) // shapes and cfg checked above
				return []*Node{lp, d}
			})
		})
	} else {
		outs = headOutputs(ctx, m, batch, []*Node{teacher}, func(z *Node, rows []*Node) []*Node {
			d, _ := loss.GeneralizedJSDTokens(z, rows[0], cfg) // cfg checked above
			return []*Node{d}
		})
	}
	return Output{rollout.KeyLogProbs: outs[0], outTokenJSD: outs[1]}, nil
}

// ComputeLoss is GKD's generalized JSD.
func (s *gkd) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	res, err := loss.ReduceGeneralizedJSD(out[outTokenJSD], batch[bLossMask], r)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, map[string]*Node{"jsd": res.Loss}, nil
}

// Produce is the forward-only log_probs and full logits (a GKD teacher's role), or with
// gkd_teacher_top_k the top-k summary in place of the logits, computed a chunk of rows at a
// time so that only the narrow summary leaves the device.
func (s *gkd) Produce() runtime.OutputFn {
	return func(ctx *context.Context, m *runtime.Model, batch map[string]*Node) map[string]*Node {
		if s.topK > 0 {
			return s.produceTopK(ctx, m, batch)
		}
		// The teacher's full logits are its product (a wide column of the rollout); forward
		// only, without gradient.
		outs := perPosition(ctx, m, batch, []*Node{batch[bTargets]}, func(h *Node, in []*Node) []*Node {
			logits := m.Logits(ctx, h)
			return []*Node{runtime.LogProbs(logits, in[0]), logits}
		})
		return map[string]*Node{rollout.KeyLogProbs: outs[0], rollout.KeyLogits: outs[1]}
	}
}

// produceTopK is Produce with gkd_teacher_top_k: the log-probs of the targets and the
// summary (loss.TeacherTopK at gkd_temperature) from one chunked pass over the head.
func (s *gkd) produceTopK(ctx *context.Context, m *runtime.Model, batch map[string]*Node) map[string]*Node {
	tau := s.cfg.Knobs.GKDTemperature
	both := perPosition(ctx, m, batch, []*Node{batch[bTargets]}, func(h *Node, in []*Node) []*Node {
		return []*Node{m.HeadRows(ctx, h, in, func(z *Node, rows []*Node) *Node {
			sum, err := loss.TeacherTopK(z, s.topK, tau)
			if err != nil {
				panic(err) // a vocabulary no larger than k: the graph cannot be built
			}
			lp := ExpandAxes(runtime.LogProbs(z, rows[0]), -1)
			return Concatenate([]*Node{lp, sum}, -1)
		})}
	})[0]
	w := both.Shape().Dimensions[2]
	return map[string]*Node{
		rollout.KeyLogProbs: Squeeze(Slice(both, AxisRange(), AxisRange(), AxisRange(0, 1)), -1),
		rollout.KeyLogits:   Slice(both, AxisRange(), AxisRange(), AxisRange(1, w)),
	}
}

// DAgger trains the student by cross-entropy on the teacher's labels at the states the
// student visited (DAgger, Ross et al., 2011): teacher_actions[t] is the teacher's token for
// slot t of the student's sequence (token ids stored as floats), ℓ = −log π(a*_t | s_t),
// reduced with loss_agg_mode. As a teacher role it produces its greedy actions. Metric: nll.
type dagger struct{ lmBase }

// newDAgger builds the dagger specialization.
func newDAgger(cfg RoleConfig) (*dagger, error) {
	b, err := newLMBase("dagger", cfg)
	return &dagger{b}, err
}

// PrepareBatch reads tokens, loss_mask and teacher_actions.
func (s *dagger) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := s.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	return s.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		mb[bTeacherIDs] = shiftedIDs(data.Tok[rollout.KeyTeacherActions], rows, mb[bTokens].Shape().Dimensions[1], opts.Pad)
		return nil
	})
}

// ExtractModelOutput is the log-probs of the teacher's labels.
func (s *dagger) ExtractModelOutput(ctx *context.Context, m *runtime.Model, batch Batch) (Output, error) {
	if p := runtime.PackedFrom(batch); p != nil {
		return Output{rollout.KeyLogProbs: m.TokenLogProbsPacked(ctx, batch[bTokens], batch[bTeacherIDs], p)}, nil
	}
	return Output{rollout.KeyLogProbs: m.TokenLogProbs(ctx, batch[bTokens], batch[bTeacherIDs])}, nil
}

// ComputeLoss is the SFT cross-entropy on the teacher's labels.
func (s *dagger) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	res, err := loss.SFT(out[rollout.KeyLogProbs], batch[bLossMask], r)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}

// Produce is the forward-only log_probs and greedy actions (token ids as floats).
func (s *dagger) Produce() runtime.OutputFn {
	return func(ctx *context.Context, m *runtime.Model, batch map[string]*Node) map[string]*Node {
		outs := headOutputs(ctx, m, batch, nil, func(z *Node, _ []*Node) []*Node {
			return []*Node{ConvertDType(ArgMax(z, -1), dtypes.Float32)}
		})
		return map[string]*Node{rollout.KeyLogProbs: outs[0], rollout.KeyActions: outs[1]}
	}
}

// aggrevate is cost-to-go weighted imitation (Ross & Bagnell, 2014): a state is
// aggrevate_candidates consecutive rows (the same prefix, each followed by one candidate
// action, mask 1 on the action's tokens); the row's reward is the expert's reward-to-go
// G_k, so the cost is Q* = −G_k; L = −Σ_k (mean_k Q* − Q*_k)·log π(a_k|s), aggregated over
// states with loss_agg_mode.
type aggrevate struct{ lmBase }

// newAggreVaTe builds the aggrevate specialization.
func newAggreVaTe(cfg RoleConfig) (*aggrevate, error) {
	b, err := newLMBase("aggrevate", cfg)
	if err == nil && cfg.Knobs.AggrevateCandidates < 1 {
		err = fmt.Errorf("aggrevate: aggrevate_candidates must be >= 1, got %d", cfg.Knobs.AggrevateCandidates)
	}
	return &aggrevate{b}, err
}

// PrepareBatch reads tokens, loss_mask and rewards.
func (s *aggrevate) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := s.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	K := s.cfg.Knobs.AggrevateCandidates
	if data.GroupID != nil {
		for i := 0; i+K <= data.Len(); i += K {
			for j := i + 1; j < i+K; j++ {
				if data.GroupID[j] != data.GroupID[i] {
					return nil, fmt.Errorf("aggrevate: rows %d and %d of one state have groups %q and %q", i, j, data.GroupID[i], data.GroupID[j])
				}
			}
		}
	}
	costs := make([]float64, data.Len()) // Q* = −reward-to-go
	for i, r := range data.Reward {
		costs[i] = -r
	}
	mbs, err := s.lmBatches(data, opts, K, func(mb map[string]*tensors.Tensor, rows []int) error {
		mb[bCosts] = rowValues(costs, rows)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The reducer's rows are states: count over each state's K candidate masks together.
	rows := shiftedMasks(data.Mask, span(0, data.Len()))
	states := make([][]float32, 0, len(rows)/K)
	for i := 0; i < len(rows); i += K {
		var st []float32
		for _, r := range rows[i : i+K] {
			st = append(st, r...)
		}
		states = append(states, st)
	}
	denominators(mbs, loss.CountMask(states))
	return mbs, nil
}

// ComputeLoss is AggreVaTe's surrogate.
func (s *aggrevate) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	K := s.cfg.Knobs.AggrevateCandidates
	lp := out[rollout.KeyLogProbs]
	d := lp.Shape().Dimensions
	S, T := d[0]/K, d[1]
	costs := Reshape(ConvertDType(batch[bCosts], lp.DType()), S, K)
	res, err := loss.AggreVaTe(Reshape(lp, S, K, T), Reshape(batch[bLossMask], S, K, T), costs, r)
	if err != nil {
		return nil, nil, err
	}
	// Σ|w| over the mini-batch's states (den_rows counts them) and candidates, so that the
	// micro-batches add up to the mini-batch's mean however its states are grouped.
	w := res.Aux["weights"]
	states := Scalar(w.Graph(), w.DType(), float64(S)) // the micro-batch's, when it is the mini-batch
	if n := batch[bDenRows]; n != nil {
		states = Max(ConvertDType(n, w.DType()), OnesLike(states))
	}
	mean := Div(ReduceAllSum(Abs(w)), MulScalar(states, float64(K)))
	return res.Loss, map[string]*Node{"mean_abs_weight": StopGradient(mean)}, nil
}

// miniBatchShare is the micro-batch's share of the mini-batch's rows (den_rows), in like's dtype:
// a value reported once per micro-batch, times its share, adds up over the micro-batches to that
// value however the rows are grouped. The micro-batch's rows are those with a token (last_token:
// the empty rows of a token-budget micro-batch do not count). Without den_rows the micro-batch is
// the mini-batch (1).
func miniBatchShare(batch Batch, like *Node) *Node {
	total := batch[bDenRows]
	if total == nil {
		return Scalar(like.Graph(), like.DType(), 1)
	}
	total = ConvertDType(total, like.DType())
	own := ReduceAllSum(ConvertDType(batch[bLastToken], like.DType()))
	return StopGradient(Div(own, Max(total, OnesLike(total))))
}

// mixedDaggerOPD is the β-blend of cross-entropy on teacher-executed tokens and K3
// reverse KL on student-executed tokens: L = β·CE + (1−β)·K3 with β
// following the linear schedule from beta_start to beta_end over beta_decay_rollouts
// (β = 1 pure CE, β = 0 pure K3), and k3_grad choosing the K3 gradient. executed_by is a
// per-row flag: 1 when the teacher executed the row. Metrics: ce, k3, beta.
type mixedDaggerOPD struct{ lmBase }

// newMixedDaggerOPD builds the mixed_loss_dagger_opd specialization.
func newMixedDaggerOPD(cfg RoleConfig) (*mixedDaggerOPD, error) {
	b, err := newLMBase("mixed_loss_dagger_opd", cfg)
	b.tempered = true
	return &mixedDaggerOPD{b}, err
}

// PrepareBatch reads tokens, loss_mask, executed_by and teacher_log_probs; β is that of
// opts.Rollout.
func (s *mixedDaggerOPD) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := s.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	k := s.cfg.Knobs
	beta, err := loss.BetaAt(loss.BetaSchedule{Start: k.BetaStart, End: k.BetaEnd, DecayRollouts: k.BetaDecayRollouts}, opts.Rollout)
	if err != nil {
		return nil, fmt.Errorf("mixed_loss_dagger_opd: %w", err)
	}
	exec := data.Row[rollout.KeyExecutedBy]
	split := func(teacher bool) [][]float32 {
		out := make([][]float32, data.Len())
		for b, m := range data.Mask {
			out[b] = make([]float32, len(m))
			if (exec[b] == 1) == teacher {
				copy(out[b], m)
			}
		}
		return out
	}
	tm, sm := split(true), split(false)
	mbs, err := s.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		T := mb[bTokens].Shape().Dimensions[1]
		mb[bTeacherMask] = shiftedTok(tm, rows, T)
		mb[bStudentMask] = shiftedTok(sm, rows, T)
		mb[rollout.KeyTeacherLogProbs] = shiftedTok(data.Tok[rollout.KeyTeacherLogProbs], rows, T)
		return nil
	})
	if err != nil {
		return nil, err
	}
	all := span(0, data.Len())
	setScalar(mbs, bTeacherTokens, float64(loss.CountMask(shiftedMasks(tm, all)).Tokens))
	setScalar(mbs, bStudentTokens, float64(loss.CountMask(shiftedMasks(sm, all)).Tokens))
	setScalar(mbs, bBeta, beta)
	return mbs, nil
}

// ComputeLoss is the β-blend of CE and K3.
func (s *mixedDaggerOPD) ComputeLoss(out Output, batch Batch, _ loss.Reducer) (*Node, map[string]*Node, error) {
	lp := out[rollout.KeyLogProbs]
	res, err := loss.MixedCEK3(loss.MixedBatch{
		StudentOnTeacher: lp, TeacherMask: batch[bTeacherMask],
		StudentOnStudent: lp, TeacherOnStudent: batch[rollout.KeyTeacherLogProbs], StudentMask: batch[bStudentMask],
		TeacherTokens: batch[bTeacherTokens], StudentTokens: batch[bStudentTokens],
	}, batch[bBeta], loss.MixedCEK3Config{K3Grad: loss.GradForm(s.cfg.Knobs.K3Grad)})
	if err != nil {
		return nil, nil, err
	}
	// β is the same in every micro-batch, and the trainer adds micro-batches' metrics: each
	// reports its rows' share of it (R/B), which add up to β however the rows are grouped.
	res.Metrics["beta"] = Mul(res.Metrics["beta"], miniBatchShare(batch, lp))
	return res.Loss, res.Metrics, nil
}
