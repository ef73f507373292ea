package specializations

import "stx.dev/stx/rollout"

// The contracts of the built-in specializations. A role that is not
// trainable runs forward only: it needs just the inputs of its forward pass
// and produces its keys for inject syncs (the "reference" behaviour).

func init() {
	for _, c := range builtins() {
		c.New = factories[c.Name]
		MustRegister(c)
	}
}

// factories are the built-in implementations, by contract name.
var factories = map[string]func(RoleConfig) (Specialization, error){
	"actor":                 func(c RoleConfig) (Specialization, error) { return NewActor(c) },
	"critic":                func(c RoleConfig) (Specialization, error) { return NewCritic(c) },
	"sft":                   func(c RoleConfig) (Specialization, error) { return NewSFT(c) },
	"dpo":                   func(c RoleConfig) (Specialization, error) { return NewPairwise("dpo", c) },
	"simpo":                 func(c RoleConfig) (Specialization, error) { return NewPairwise("simpo", c) },
	"orpo":                  func(c RoleConfig) (Specialization, error) { return NewPairwise("orpo", c) },
	"kto":                   func(c RoleConfig) (Specialization, error) { return NewKTO(c) },
	"reward_model":          func(c RoleConfig) (Specialization, error) { return NewRewardModel(c) },
	"opd":                   func(c RoleConfig) (Specialization, error) { return NewOPD(c) },
	"gkd":                   func(c RoleConfig) (Specialization, error) { return NewGKD(c) },
	"dagger":                func(c RoleConfig) (Specialization, error) { return NewDAgger(c) },
	"aggrevate":             func(c RoleConfig) (Specialization, error) { return NewAggreVaTe(c) },
	"mixed_loss_dagger_opd": func(c RoleConfig) (Specialization, error) { return NewMixedDaggerOPD(c) },
	"flow":                  func(c RoleConfig) (Specialization, error) { return NewFlowMatching(c) },
	"flow_actor":            func(c RoleConfig) (Specialization, error) { return NewFlowActor(c) },
}

// lm are the forward inputs of a language-model role.
var lmForward = []string{rollout.KeyTokens, rollout.KeyLossMask}

// trainOnly returns forward inputs for a frozen role, else the full list.
func trainOnly(cfg RoleConfig, forward []string, full ...string) []string {
	if !cfg.Role.Trainable {
		return keys(forward...)
	}
	return keys(append(append([]string(nil), forward...), full...)...)
}

// withRef adds ref_log_probs to what a role produces when it keeps an
// in-role frozen reference.
func withRef(cfg RoleConfig, ks ...string) []string {
	if cfg.Role.InitBool("with_ref") {
		ks = append(ks, rollout.KeyRefLogProbs)
	}
	return keys(ks...)
}

func builtins() []Contract {
	return []Contract{
		{
			Name: "actor", Data: DataRL, Estimator: true,
			Doc: "policy-gradient actor: PPO/GSPO/CISPO/IS/DRO/PG losses (Schulman et al., 2017; Zheng et al., 2025; MiniMax, 2025), KL k1/k2/k3 (Schulman, 2020), entropy",
			Requires: func(c RoleConfig) []string {
				extra := []string{rollout.KeyRewards, rollout.KeySamplerLogProbs}
				if c.Knobs.UseKLLoss || c.Knobs.UseKLInReward {
					extra = append(extra, rollout.KeyRefLogProbs)
				}
				if c.Knobs.EstimatorFor(c.Role.Name) == "gae" {
					extra = append(extra, rollout.KeyValues)
				}
				return trainOnly(c, lmForward, extra...)
			},
			Produces: func(c RoleConfig) []string { return withRef(c, rollout.KeyLogProbs) },
		},
		{
			Name: "critic", Data: DataRL,
			Doc: "value model: clipped value loss on GAE returns (Schulman et al., 2016; 2017)",
			// v_old of the clip and GAE's V are the rollout-time values the role produced.
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyRewards, rollout.KeyValues) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyValues) },
		},
		{
			Name: "dpo", Data: DataPreference,
			Doc: "DPO family: sigmoid, cDPO, hinge, IPO (Rafailov et al., 2023; Azar et al., 2023)",
			Requires: func(c RoleConfig) []string {
				return trainOnly(c, lmForward, rollout.KeyChosen, rollout.KeyRefLogProbs)
			},
			Produces: func(c RoleConfig) []string { return withRef(c, rollout.KeyLogProbs) },
		},
		{
			Name: "simpo", Data: DataPreference,
			Doc:      "SimPO: reference-free length-normalised margin (Meng et al., 2024)",
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyChosen) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		},
		{
			Name: "orpo", Data: DataPreference,
			Doc:      "ORPO: chosen NLL plus odds-ratio term (Hong et al., 2024)",
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyChosen) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		},
		{
			Name: "kto", Data: DataKTO,
			Doc: "KTO: desirable/undesirable examples against a KL baseline (Ethayarajh et al., 2024)",
			Requires: func(c RoleConfig) []string {
				return trainOnly(c, lmForward, rollout.KeyLabel, rollout.KeyRefLogProbs)
			},
			Produces: func(c RoleConfig) []string { return withRef(c, rollout.KeyLogProbs) },
		},
		{
			Name: "reward_model", Data: DataPreference,
			Doc:      "Bradley–Terry reward model with a scalar head (Ouyang et al., 2022)",
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyChosen) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyRewards) },
		},
		{
			Name: "sft", Data: DataSFT,
			Doc:      "supervised cross-entropy on completion tokens (Ouyang et al., 2022)",
			Requires: func(c RoleConfig) []string { return keys(lmForward...) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		},
		{
			Name: "opd", Data: DataRL,
			Doc: "on-policy distillation: teacher−student log-prob gaps as precomputed advantages (Agarwal et al., 2024; Lu et al., 2025)",
			Requires: func(c RoleConfig) []string {
				return trainOnly(c, lmForward, rollout.KeySamplerLogProbs, rollout.KeyTeacherLogProbs)
			},
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		},
		{
			Name: "gkd", Data: DataRL,
			Doc:      "GKD: generalized JSD to the teacher's full distribution (Agarwal et al., 2024)",
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyTeacherLogits) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs, rollout.KeyLogits) },
		},
		{
			Name: "dagger", Data: DataRL,
			Doc:      "DAgger: cross-entropy on the teacher's labels at the student's states (Ross et al., 2011)",
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyTeacherActions) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs, rollout.KeyActions) },
		},
		{
			Name: "aggrevate", Data: DataRL, Teacher: true, TeacherReward: true,
			Doc:      "AggreVaTe: imitation weighted by the expert's cost-to-go (Ross & Bagnell, 2014)",
			Requires: func(c RoleConfig) []string { return trainOnly(c, lmForward, rollout.KeyRewards) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		},
		{
			Name: "mixed_loss_dagger_opd", Data: DataImitation, Teacher: true,
			Doc: "β-blend of CE on teacher-executed and K3 on student-executed tokens (stx's own blend of SFT and K3, Schulman, 2020)",
			Requires: func(c RoleConfig) []string {
				return trainOnly(c, lmForward, rollout.KeyExecutedBy, rollout.KeyTeacherLogProbs)
			},
			Produces: func(RoleConfig) []string { return keys(rollout.KeyLogProbs) },
		},
		{
			Name: "flow", Data: DataFlow,
			Doc:      "rectified-flow velocity regression (Liu et al., 2022)",
			Requires: func(RoleConfig) []string { return keys(rollout.KeySamples) },
			Produces: func(RoleConfig) []string { return keys(rollout.KeyVelocity) },
		},
		{
			Name: "flow_actor", Data: DataFlowRL, Estimator: true,
			Doc: "Flow-GRPO: SDE step log-probs under a PPO clip (Liu et al., 2025)",
			Requires: func(c RoleConfig) []string {
				return trainOnly(c, []string{rollout.KeyTrajectories}, rollout.KeyRewards, rollout.KeySamplerLogProbs)
			},
			Produces: func(RoleConfig) []string { return keys(rollout.KeyStepLogProbs) },
		},
	}
}
