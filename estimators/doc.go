// Package estimators holds the advantage estimators of stx (GRPO, Dr.GRPO, REINFORCE,
// REINFORCE++-baseline, RLOO, ReMax, GAE and advantages a workflow supplies), their registry,
// RolloutAdvantages, which runs one role's estimator over the rows of a Rollout and writes their
// per-token advantages (and returns), rejection and DAPO's dynamic
// sampling, and validation metrics such as the unbiased pass@k (Chen et al., 2021). The rollout
// data they read and write (rollout.Rollout) and its column keys live in package rollout.
//
// The package imports nothing of stx but package rollout and no tensor library: all host-side math is done in float64
// and per-token columns are stored as float32, the width the model side consumes.
package estimators
