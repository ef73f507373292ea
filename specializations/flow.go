package specializations

import (
	"fmt"
	"math"
	"math/rand/v2"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

func init() {
	MustRegister(Contract{
		Name: "flow", Data: DataFlow,
		Doc:      "rectified-flow velocity regression (Liu et al., 2022)",
		Requires: func(RoleConfig) []string { return keys(rollout.KeySamples) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyVelocity) },
		New:      func(c RoleConfig) (Specialization, error) { return newFlowMatching(c) },
	})
	MustRegister(Contract{
		Name: "flow_actor", Data: DataFlowRL, Estimator: true,
		Doc: "Flow-GRPO: SDE step log-probs under a PPO clip (Liu et al., 2025)",
		Requires: func(c RoleConfig) []string {
			return trainOnly(c, []string{rollout.KeyTrajectories}, rollout.KeyRewards, rollout.KeySamplerLogProbs)
		},
		Produces: func(RoleConfig) []string { return keys(rollout.KeyStepLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newFlowActor(c) },
	})
}

// Flow data lives in wide per-row columns (see SetRowVectors): samples/i holds component i
// of a data point x_0; trajectories/i holds one SDE transition per row laid out as
// [x (D), x_next (D), σ, σ_next]. A flow rollout's Tokens are empty rows: Tokens only
// defines the number of rows.

// Batch keys of the flow specializations.
const (
	bX         = "x"          // [N,D] data x_0 (flow) or state x (flow_actor)
	bNoise     = "noise"      // [N,D] ε
	bSigma     = "sigma"      // [N] σ
	bXNext     = "x_next"     // [N,D]
	bSigmaNext = "sigma_next" // [N]
	bOldLogp   = "old_logp"   // [N] sampler's step log-probs
	bAdv       = "advantages" // [N]
)

// flowBase is what both flow specializations share.
type flowBase struct {
	selfLoss[*runtime.VelocityModel]
	contract Contract
	cfg      RoleConfig
}

func newFlowBase(name string, cfg RoleConfig) (flowBase, error) {
	c, err := Get(name)
	return flowBase{contract: c, cfg: cfg}, err
}

func (b flowBase) Contract() Contract { return b.contract }

// Reducer is unused by the flow losses (they average over samples with the batch's
// count) but part of the contract.
func (b flowBase) Reducer(Batch) loss.Reducer { return loss.Reducer{Mode: loss.AggTokenMean} }

// rowVectors reads the wide per-row column key for rows as a flat [len(rows)·D] slice.
func rowVectors(data *rollout.Rollout, key string, rows []int, from, dim int) []float32 {
	out := make([]float32, len(rows)*dim)
	for c := range dim {
		col := data.Row[WideName(key, from+c)]
		for i, r := range rows {
			out[i*dim+c] = float32(col[r])
		}
	}
	return out
}

// FlowMatching trains a velocity model by rectified flow (Liu et al., 2022):
// x_σ = (1 − σ)x_0 + σε, u = ε − x_0, L = mean_samples mean_dims (v_θ(x_σ, σ) − u)², with
// σ ~ U(0,1) or logit-normal (flow_sigma_sampling) and ε ~ N(0, I) drawn on the host from
// opts.Seed and opts.Rollout.
type flowMatching struct{ flowBase }

// newFlowMatching builds the flow specialization.
func newFlowMatching(cfg RoleConfig) (*flowMatching, error) {
	b, err := newFlowBase("flow", cfg)
	if err == nil {
		switch cfg.Knobs.FlowSigmaSampling {
		case "", "uniform", "logit_normal":
		default:
			err = fmt.Errorf("flow: unknown flow_sigma_sampling %q", cfg.Knobs.FlowSigmaSampling)
		}
	}
	return &flowMatching{b}, err
}

// PrepareBatch reads samples.
func (s *flowMatching) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if err := requireKeys(s.contract.Name, data, s.contract.Requires(s.cfg)); err != nil {
		return nil, err
	}
	D, n := wideDim(data.Row, rollout.KeySamples), data.Len()
	rng := rand.New(rand.NewPCG(opts.Seed, uint64(opts.Rollout)))
	noise := make([]float32, n*D)
	sigma := make([]float64, n)
	for i := range n {
		for c := range D {
			noise[i*D+c] = float32(rng.NormFloat64())
		}
		if s.cfg.Knobs.FlowSigmaSampling == "logit_normal" {
			sigma[i] = 1 / (1 + math.Exp(-rng.NormFloat64()))
		} else {
			sigma[i] = rng.Float64()
		}
	}
	var mbs []map[string]*tensors.Tensor
	for _, c := range chunks(n, opts.MicroBatchSize) {
		rows := span(c[0], c[1])
		mbs = append(mbs, map[string]*tensors.Tensor{
			bX:     tensors.FromFlatDataAndDimensions(rowVectors(data, rollout.KeySamples, rows, 0, D), len(rows), D),
			bNoise: tensors.FromFlatDataAndDimensions(noise[c[0]*D:c[1]*D], len(rows), D),
			bSigma: rowValues(sigma, rows),
		})
	}
	setScalar(mbs, bCount, float64(n))
	return mbs, nil
}

// ExtractModelOutput is the predicted velocity at x_σ and the target u.
func (s *flowMatching) ExtractModelOutput(ctx *context.Context, m *runtime.VelocityModel, batch Batch) (Output, error) {
	xs, u, err := loss.FlowInterpolate(batch[bX], batch[bNoise], batch[bSigma])
	if err != nil {
		return nil, err
	}
	return Output{rollout.KeyVelocity: m.Forward(ctx, xs, batch[bSigma]), "target": u}, nil
}

// ComputeLoss is the rectified-flow velocity loss.
func (s *flowMatching) ComputeLoss(out Output, batch Batch, _ loss.Reducer) (*Node, map[string]*Node, error) {
	res, err := loss.RectifiedFlowLoss(out[rollout.KeyVelocity], out["target"], batch[bCount])
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, map[string]*Node{}, nil
}

// Produce is the forward-only velocity at the batch's x_σ.
func (s *flowMatching) Produce() runtime.OutputOf[*runtime.VelocityModel] {
	return func(ctx *context.Context, m *runtime.VelocityModel, batch map[string]*Node) map[string]*Node {
		out, err := s.ExtractModelOutput(ctx, m, batch)
		if err != nil {
			panic(err)
		}
		return map[string]*Node{rollout.KeyVelocity: out[rollout.KeyVelocity]}
	}
}

// flowActor is Flow-GRPO (Liu et al., 2025): every SDE step of the sampler is a Gaussian
// policy step with log p(x_next | x) from the velocity model (noise level a =
// flow_noise_level, σ_max = 1 − 1/flow_steps for σ = 1), trained with PPO (ε =
// flow_clip_eps) on group-normalised rewards (r − mean)/(std + 1e-4) clipped to [−5, 5],
// one advantage per trajectory for all its steps. A row is one transition (see
// trajectories); its sampler_log_probs is a per-row column. Metrics: clipfrac, ppo_kl,
// ratio_mean/max/min.
type flowActor struct{ flowBase }

// newFlowActor builds the flow_actor specialization.
func newFlowActor(cfg RoleConfig) (*flowActor, error) {
	b, err := newFlowBase("flow_actor", cfg)
	if err == nil && cfg.Knobs.FlowSteps < 2 {
		err = fmt.Errorf("flow_actor: flow_steps must be >= 2, got %d", cfg.Knobs.FlowSteps)
	}
	return &flowActor{b}, err
}

// ComputeAdvantages sets Row["advantages"]: Flow-GRPO's group-normalised, clipped rewards
// (groups by GroupID, trajectories by Traj; population std as flow_grpo's numpy).
func (s *flowActor) ComputeAdvantages(data *rollout.Rollout) ([]string, error) {
	if data.Reward == nil {
		return nil, fmt.Errorf("flow_actor: the rollout has no %q column", rollout.KeyRewards)
	}
	n := data.Len()
	group := func(i int) string {
		if data.GroupID == nil {
			return ""
		}
		return data.GroupID[i]
	}
	traj := func(i int) int {
		if data.Traj == nil {
			return i
		}
		return data.Traj[i]
	}
	// One reward per trajectory (its first row), grouped.
	type stat struct{ sum, sq, n float64 }
	stats := map[string]*stat{}
	seen := map[int]bool{}
	for i := range n {
		if seen[traj(i)] {
			continue
		}
		seen[traj(i)] = true
		st := stats[group(i)]
		if st == nil {
			st = &stat{}
			stats[group(i)] = st
		}
		st.sum += data.Reward[i]
		st.sq += data.Reward[i] * data.Reward[i]
		st.n++
	}
	adv := make([]float64, n)
	for i := range n {
		st := stats[group(i)]
		mean := st.sum / st.n
		std := math.Sqrt(math.Max(st.sq/st.n-mean*mean, 0))
		adv[i] = math.Max(-5, math.Min(5, (data.Reward[i]-mean)/(std+1e-4)))
	}
	return nil, data.SetRow(rollout.KeyAdvantages, adv)
}

// PrepareBatch reads trajectories, rewards (through ComputeAdvantages, unless the rollout
// already holds advantages) and sampler_log_probs.
func (s *flowActor) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if err := requireKeys(s.contract.Name, data, s.contract.Requires(s.cfg)); err != nil {
		return nil, err
	}
	return s.batches(data, opts, s.cfg.Role.Trainable)
}

// batches cuts the transitions into micro-batches; trainable adds the PPO inputs.
func (s *flowActor) batches(data *rollout.Rollout, opts BatchOptions, trainable bool) ([]map[string]*tensors.Tensor, error) {
	W := wideDim(data.Row, rollout.KeyTrajectories)
	if W < 4 || W%2 != 0 {
		return nil, fmt.Errorf("flow_actor: trajectories have %d components, want 2·D + 2", W)
	}
	D := (W - 2) / 2
	if trainable {
		if _, ok := data.Row[rollout.KeyAdvantages]; !ok {
			data = shallowCopy(data)
			if _, err := s.ComputeAdvantages(data); err != nil {
				return nil, err
			}
		}
	}
	var mbs []map[string]*tensors.Tensor
	for _, c := range chunks(data.Len(), opts.MicroBatchSize) {
		rows := span(c[0], c[1])
		R := len(rows)
		mb := map[string]*tensors.Tensor{
			bX:         tensors.FromFlatDataAndDimensions(rowVectors(data, rollout.KeyTrajectories, rows, 0, D), R, D),
			bXNext:     tensors.FromFlatDataAndDimensions(rowVectors(data, rollout.KeyTrajectories, rows, D, D), R, D),
			bSigma:     tensors.FromFlatDataAndDimensions(rowVectors(data, rollout.KeyTrajectories, rows, 2*D, 1), R),
			bSigmaNext: tensors.FromFlatDataAndDimensions(rowVectors(data, rollout.KeyTrajectories, rows, 2*D+1, 1), R),
		}
		if trainable {
			mb[bOldLogp] = rowValues(data.Row[rollout.KeySamplerLogProbs], rows)
			mb[bAdv] = rowValues(data.Row[rollout.KeyAdvantages], rows)
		}
		mbs = append(mbs, mb)
	}
	setScalar(mbs, bCount, float64(data.Len()))
	return mbs, nil
}

// stepLogProb is log p_θ(x_next | x) of each transition.
func (s *flowActor) stepLogProb(ctx *context.Context, m *runtime.VelocityModel, batch Batch) (*Node, error) {
	v := m.Forward(ctx, batch[bX], batch[bSigma])
	st, err := loss.SDEStepLogProb(batch[bX], v, batch[bXNext], batch[bSigma], batch[bSigmaNext],
		loss.SDEConfig{NoiseLevel: s.cfg.Knobs.FlowNoiseLevel, SigmaMax: 1 - 1/float64(s.cfg.Knobs.FlowSteps)})
	if err != nil {
		return nil, err
	}
	return st.LogProb, nil
}

// ExtractModelOutput is the step log-probs.
func (s *flowActor) ExtractModelOutput(ctx *context.Context, m *runtime.VelocityModel, batch Batch) (Output, error) {
	lp, err := s.stepLogProb(ctx, m, batch)
	if err != nil {
		return nil, err
	}
	return Output{rollout.KeyStepLogProbs: lp}, nil
}

// ComputeLoss is Flow-GRPO's clipped policy loss.
func (s *flowActor) ComputeLoss(out Output, batch Batch, _ loss.Reducer) (*Node, map[string]*Node, error) {
	eps := s.cfg.Knobs.FlowClipEps
	res, err := loss.FlowGRPOLoss(out[rollout.KeyStepLogProbs], batch[bOldLogp], batch[bAdv], batch[bCount],
		loss.PPOConfig{EpsLow: eps, EpsHigh: eps})
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}

// Produce is the forward-only step_log_probs of each transition (e.g. the sampler's).
func (s *flowActor) Produce() runtime.OutputOf[*runtime.VelocityModel] {
	return func(ctx *context.Context, m *runtime.VelocityModel, batch map[string]*Node) map[string]*Node {
		lp, err := s.stepLogProb(ctx, m, batch)
		if err != nil {
			panic(err)
		}
		return map[string]*Node{rollout.KeyStepLogProbs: lp}
	}
}

// FlowProducer runs a flow specialization forward-only and writes what it produces into
// the rollout: the reference behaviour of a frozen flow role.
type FlowProducer struct {
	spec Flow
	eval *runtime.Evaluator
}

// NewFlowProducer prepares spec's forward-only outputs with model m on backend.
func NewFlowProducer(backend *runtime.Backend, spec Flow, m *runtime.VelocityModel) (*FlowProducer, error) {
	e, err := runtime.NewEvaluator(backend, m, spec.Produce())
	if err != nil {
		return nil, fmt.Errorf("%s producer: %w", spec.Contract().Name, err)
	}
	return &FlowProducer{spec: spec, eval: e}, nil
}

// Produce computes the produced keys for every row of data and stores them under
// rename[key] when set: one value per row in data.Row, vectors as wide Row columns.
func (p *FlowProducer) Produce(data *rollout.Rollout, opts BatchOptions, rename map[string]string) error {
	name := p.spec.Contract().Name
	var mbs []map[string]*tensors.Tensor
	var err error
	switch s := p.spec.(type) {
	case *flowActor:
		if err = requireKeys(name, data, []string{rollout.KeyTrajectories}); err == nil {
			mbs, err = s.batches(data, opts, false)
		}
	default:
		mbs, err = s.PrepareBatch(data, opts)
	}
	if err != nil {
		return err
	}
	perRow := map[string][]float64{}
	vecs := map[string][][]float32{}
	for _, mb := range mbs {
		delete(mb, bCount) // the evaluator's keys must not depend on how the loss normalises
		outs, err := p.eval.Run(mb)
		if err != nil {
			return fmt.Errorf("%s produce: %w", name, err)
		}
		for key, t := range outs {
			if rename[key] != "" {
				key = rename[key]
			}
			flat, err := tensors.CopyFlatData[float32](t)
			if err != nil {
				return fmt.Errorf("%s produce %q: %w", name, key, err)
			}
			dims := t.Shape().Dimensions
			switch len(dims) {
			case 1:
				for _, v := range flat {
					perRow[key] = append(perRow[key], float64(v))
				}
			case 2:
				for i := range dims[0] {
					vecs[key] = append(vecs[key], flat[i*dims[1]:(i+1)*dims[1]])
				}
			default:
				return fmt.Errorf("%s produce %q: unexpected shape %v", name, key, dims)
			}
		}
	}
	for k, v := range perRow {
		if err := data.SetRow(k, v); err != nil {
			return err
		}
	}
	for k, v := range vecs {
		if err := SetRowVectors(data, k, v); err != nil {
			return err
		}
	}
	return nil
}
