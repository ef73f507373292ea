package rollout

// Data keys: the names of the columns of a Rollout and of the micro-batch tensors that
// specializations build from them. Recipes name them in syncs (keys, target_keys) and
// contracts list them in Requires and Produces.

// Keys of the model side: what a role's batch holds and what a role produces.
const (
	KeyTokens          = "tokens"            // prompt + completion token ids
	KeyLossMask        = "loss_mask"         // 1 on trainable completion tokens
	KeyRewards         = "rewards"           // per-sequence scalar reward
	KeySamplerLogProbs = "sampler_log_probs" // log-probs reported by the sampler
	KeyLogProbs        = "log_probs"         // per-token log-probs of a model
	KeyRefLogProbs     = "ref_log_probs"     // reference model's log-probs
	KeyValues          = "values"            // critic predictions per token
	KeyTeacherLogProbs = "teacher_log_probs" // teacher's log-probs of the student's tokens
	KeyLogits          = "logits"            // full next-token logits
	KeyTeacherLogits   = "teacher_logits"    // teacher's full logits, or its top-k column (knobs.gkd_teacher_top_k)
	KeyActions         = "actions"           // a model's greedy token at each position
	KeyTeacherActions  = "teacher_actions"   // the teacher's labels at the student's states
	KeySamples         = "samples"           // continuous data points (flow matching)
	KeyTrajectories    = "trajectories"      // sampler states x_k, x_k+1, σ_k (Flow-GRPO)
	KeyVelocity        = "velocity"          // a velocity model's prediction
	KeyStepLogProbs    = "step_log_probs"    // per-step log-probs of an SDE sampler
)

// Per-token columns (Rollout.Tok) that the estimators write.
const (
	KeyReturns      = "returns"       // value targets (GAE)
	KeyAdvantages   = "advantages"    // per-token advantages
	KeyTokenRewards = "token_rewards" // per-token reward shaping added to the outcome reward
)

// Per-row columns (Rollout.Row).
const (
	// KeyChosen is 1 for the chosen and 0 for the rejected sequence of a preference pair (a group of two).
	KeyChosen = "chosen"
	// KeyLabel is KTO's desirable (1) / undesirable (0) label.
	KeyLabel = "label"
	// KeyIsCorrect is 1 when the row's trajectory was judged correct, else 0.
	KeyIsCorrect = "is_correct"
	// KeyExecutedBy is 1 where the teacher executed the row's rollout, 0 where the student did.
	KeyExecutedBy = "executed_by"
	// KeyGreedyReward is the reward of the greedy rollout of the row's prompt (ReMax's
	// baseline), read by the estimators.
	KeyGreedyReward = "greedy_reward"
)
