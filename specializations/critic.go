package specializations

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

func init() {
	MustRegister(Contract{
		Name: "critic", Data: DataRL, ValueHead: true,
		Doc: "value model: clipped value loss on GAE returns (Schulman et al., 2016; 2017)",
		// v_old of the clip and GAE's V are the rollout-time values the role produced.
		Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyRewards, rollout.KeyValues) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyValues) },
		New:      func(c RoleConfig) (Specialization, error) { return newCritic(c) },
	})
}

// critic is the PPO value model: the clipped value loss ½·agg(max((v − R)², (v_c − R)²))
// on GAE returns (Schulman et al., 2016; 2017). Its model needs a value head
// (runtime.Model.AddValueHead); the value at position t is V of the state before token
// t+1, so the values it produces line up with the actor's advantages. v_old are the
// rollout-time values (the rollout's values column, which this role produced).
// Metrics: vf_loss, vf_clipfrac.
type critic struct{ lmBase }

// newCritic builds the critic specialization.
func newCritic(cfg RoleConfig) (*critic, error) {
	b, err := newLMBase("critic", cfg)
	return &critic{b}, err
}

// PrepareBatch reads tokens, loss_mask, rewards and values; returns come from GAE
// (γ, λ of the knobs) unless the rollout already holds them.
func (c *critic) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := c.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	if _, ok := data.Tok[rollout.KeyReturns]; !ok {
		data = shallowCopy(data)
		k := c.cfg.Knobs
		cfg := estimators.Config{Name: estimators.GAE, Gamma: k.Gamma, Lambda: k.Lambda, Epsilon: estimators.DefaultEpsilon,
			WhitenEps: estimators.DefaultWhitenEps}
		if _, err := estimators.RolloutAdvantages(data, cfg); err != nil {
			return nil, fmt.Errorf("critic returns: %w", err)
		}
	}
	return c.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		T := mb[bTokens].Shape().Dimensions[1]
		mb[rollout.KeyValues] = shiftedTok(data.Tok[rollout.KeyValues], rows, T)
		mb[rollout.KeyReturns] = shiftedTok(data.Tok[rollout.KeyReturns], rows, T)
		return nil
	})
}

// values is the value head over the decoder's hidden states, [R,T].
func values(ctx *context.Context, m *runtime.Model, batch Batch) (*Node, error) {
	if !m.Config.HasValueHead {
		return nil, fmt.Errorf("the model has no value head (runtime.Model.AddValueHead)")
	}
	if p := runtime.PackedFrom(batch); p != nil {
		return p.Unpack(m.ValueHead(ctx, m.ForwardPacked(ctx, batch[bTokens], p))), nil
	}
	return m.ValueHead(ctx, m.Forward(ctx, batch[bTokens])), nil
}

// ExtractModelOutput is the value of every position.
func (c *critic) ExtractModelOutput(ctx *context.Context, m *runtime.Model, batch Batch) (Output, error) {
	v, err := values(ctx, m, batch)
	if err != nil {
		return nil, fmt.Errorf("critic: %w", err)
	}
	return Output{rollout.KeyValues: v}, nil
}

// ComputeLoss is PPO's clipped value loss (ε_v = cliprange_value).
func (c *critic) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	res, err := loss.ValueLoss(out[rollout.KeyValues], batch[rollout.KeyValues], batch[rollout.KeyReturns], batch[bLossMask],
		loss.ValueConfig{ClipRange: c.cfg.Knobs.ClipRangeValue}, r)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}

// Produce is the forward-only values.
func (c *critic) Produce() runtime.OutputFn {
	return func(ctx *context.Context, m *runtime.Model, batch map[string]*Node) map[string]*Node {
		v, err := values(ctx, m, batch)
		if err != nil {
			panic(fmt.Errorf("critic: %w", err))
		}
		return map[string]*Node{rollout.KeyValues: v}
	}
}
