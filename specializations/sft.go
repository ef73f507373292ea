package specializations

import (
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/specializations/loss"
)

func init() {
	MustRegister(Contract{
		Name: "sft", Data: DataSFT,
		Doc:      "supervised cross-entropy on completion tokens (Ouyang et al., 2022)",
		Requires: func(c RoleConfig) []string { return keys(lmForward...) },
		Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newSFT(c) },
	})
}

// sft is supervised fine-tuning: cross-entropy on the completion tokens, ℓ = −logp_target
// reduced with loss_agg_mode.
type sft struct{ lmBase }

// newSFT builds the sft specialization.
func newSFT(cfg RoleConfig) (*sft, error) {
	b, err := newLMBase("sft", cfg)
	return &sft{b}, err
}

// PrepareBatch reads tokens and loss_mask.
func (s *sft) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if err := s.requires(data); err != nil {
		return nil, err
	}
	return s.lmBatches(data, opts, 1, nil)
}

// ComputeLoss is the SFT cross-entropy. Metric: nll.
func (s *sft) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	res, err := loss.SFT(out[rollout.KeyLogProbs], batch[bLossMask], r)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}
