package loss

// The tests build their configurations from these, the defaults of the
// papers and reference implementations (recipes take theirs from the
// schema), and check the on-policy distillation metric against TeacherKL.

// DefaultOPDConfig is κ = 1, γ_kl = 0, no clip (the usual on-policy distillation setting).
func DefaultOPDConfig() OPDConfig { return OPDConfig{KLCoef: 1} }

// DefaultGKDConfig is β = 0.5, τ = 1 (trl's GKD defaults).
func DefaultGKDConfig() GKDConfig { return GKDConfig{Beta: 0.5, Temperature: 1} }

// DefaultFlowGRPOConfig is the PPO configuration of Flow-GRPO (Liu et al., 2025): ε = 1e-4,
// no dual clip.
func DefaultFlowGRPOConfig() PPOConfig {
	return PPOConfig{EpsLow: 1e-4, EpsHigh: 1e-4, LogRatioClamp: 20}
}

// DefaultKLConfig is k3 with verl's clamps and its own gradient (verl's default).
func DefaultKLConfig() KLConfig {
	return KLConfig{Estimator: KLK3, LogRatioClamp: 20, OutputClamp: 10, Grad: GradDirect}
}

// DefaultPPOConfig is ε_low = ε_high = 0.2, no dual clip (PPO's defaults).
func DefaultPPOConfig() PPOConfig { return PPOConfig{EpsLow: 0.2, EpsHigh: 0.2, LogRatioClamp: 20} }

// DefaultGSPOConfig is the GSPO paper's ε_low = 3e-4, ε_high = 4e-4 (Zheng et al., 2025).
// The recommended aggregation is seq-mean-token-mean.
func DefaultGSPOConfig() GSPOConfig {
	return GSPOConfig{EpsLow: 3e-4, EpsHigh: 4e-4, SeqLogRatioMax: 10}
}

// DefaultCISPOConfig is lo = 0 (lower bound disabled), hi = 4 (tinker's bounds; MiniMax-M1 has no lower bound either).
func DefaultCISPOConfig() CISPOConfig { return CISPOConfig{ClipLow: 0, ClipHigh: 4, LogRatioClamp: 20} }

// DefaultDPOConfig is sigmoid DPO with β = 0.1 (the DPO paper's and TRL's default).
func DefaultDPOConfig() DPOConfig { return DPOConfig{Type: DPOSigmoid, Beta: 0.1} }

// DefaultSimPOConfig is the SimPO paper's β = 2, γ = 1.
func DefaultSimPOConfig() SimPOConfig { return SimPOConfig{Beta: 2, Gamma: 1} }

// DefaultKTOConfig is β = 0.1, λ_D = λ_U = 1 (the KTO paper's and TRL's defaults).
func DefaultKTOConfig() KTOConfig {
	return KTOConfig{Beta: 0.1, DesirableWeight: 1, UndesirableWeight: 1}
}

// DefaultValueConfig is ε_v = 0.5 (verl's and OpenRLHF's default).
func DefaultValueConfig() ValueConfig { return ValueConfig{ClipRange: 0.5} }

// TeacherKL is the on-policy distillation metric: Σ mask·(ls − lt) / Σ mask (0 when empty),
// the sampled estimate of the reverse KL KL(π_S‖π_T) per token.
func TeacherKL(teacherLogp, samplerLogp, mask [][]float64) (float64, error) {
	if err := sameHostShape("teacher kl", teacherLogp, samplerLogp, mask); err != nil {
		return 0, err
	}
	sum, n := 0.0, 0.0
	for b := range mask {
		for t, m := range mask[b] {
			if m != 0 {
				sum += samplerLogp[b][t] - teacherLogp[b][t]
				n++
			}
		}
	}
	if n == 0 {
		return 0, nil
	}
	return sum / n, nil
}
