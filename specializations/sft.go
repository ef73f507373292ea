package specializations

import (
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

// SFT is supervised fine-tuning: cross-entropy on the completion tokens, ℓ = −logp_target
// reduced with loss_agg_mode.
type SFT struct{ lmBase }

// NewSFT builds the sft specialization.
func NewSFT(cfg RoleConfig) (*SFT, error) {
	b, err := newLMBase("sft", cfg)
	return &SFT{b}, err
}

// PrepareBatch reads tokens and loss_mask.
func (s *SFT) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if err := s.requires(data); err != nil {
		return nil, err
	}
	return s.lmBatches(data, opts, 1, nil)
}

// ComputeLoss is the SFT cross-entropy. Metric: nll.
func (s *SFT) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	res, err := loss.SFT(out[rollout.KeyLogProbs], batch[bLossMask], r)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}

// Loss is the runtime.LossFn of the role.
func (s *SFT) Loss() runtime.LossFn { return lossFn(s) }
