// Package estimators holds the advantage estimators of stx (GRPO, Dr.GRPO, REINFORCE,
// REINFORCE++-baseline, RLOO, ReMax, GAE and advantages a workflow supplies), their registry,
// the role-aware reward/advantage pipeline that turns trajectory groups into per-token
// advantages and metrics (Collect, RolloutAdvantages over a Rollout), rejection and DAPO's dynamic
// sampling, validation metrics such as the unbiased pass@k (Chen et al., 2021), and Rollout,
// the columnar rollout data that the engine, the specializations and the estimators pass around.
//
// The package imports nothing of stx and no tensor library: all host-side math is done in float64
// and per-token columns are stored as float32, the width the model side consumes.
package estimators
