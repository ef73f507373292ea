package loss

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// perSample reshapes a per-sample value s (a scalar or [N]) so that it broadcasts
// against x of shape [N, ...].
func perSample(what, name string, s, x *Node) (*Node, error) {
	if s == nil {
		return nil, fmt.Errorf("%s: %s is missing", what, name)
	}
	s = toDType(s, x)
	switch {
	case s.Rank() == 0:
		return s, nil
	case s.Rank() == 1 && x.Rank() >= 1 && s.Shape().Dimensions[0] == x.Shape().Dimensions[0]:
		dims := make([]int, x.Rank())
		for i := range dims {
			dims[i] = 1
		}
		dims[0] = x.Shape().Dimensions[0]
		return Reshape(s, dims...), nil
	}
	return nil, fmt.Errorf("%s: %s must be a scalar or [N] with N = %d, got %s", what, name, x.Shape().Dimensions[0], s.Shape())
}

// meanOverDims averages x [N, ...] over every axis but the first, giving [N].
func meanOverDims(x *Node) *Node {
	if x.Rank() == 1 {
		return x
	}
	axes := make([]int, x.Rank()-1)
	for i := range axes {
		axes[i] = i + 1
	}
	return ReduceMean(x, axes...)
}

// FlowInterpolate returns the flow-matching input and target of rectified flow (Liu et al., 2022):
// x_σ = (1 − σ)·x_0 + σ·ε and u = ε − x_0 (σ = 0 is data, σ = 1 is noise), for data
// x0 and noise [N, ...] and sigma a scalar or [N]. Both outputs are constants.
func FlowInterpolate(x0, noise, sigma *Node) (xSigma, velocity *Node, err error) {
	if x0 == nil || noise == nil || !sameDims(x0, noise) || x0.Rank() < 1 {
		return nil, nil, fmt.Errorf("flow interpolate: x_data and noise must be [N, ...] of one shape")
	}
	x0 = StopGradient(x0)
	eps := StopGradient(toDType(noise, x0))
	s, err := perSample("flow interpolate", "sigma", StopGradient(sigma), x0)
	if err != nil {
		return nil, nil, err
	}
	return Add(Mul(OneMinus(s), x0), Mul(s, eps)), Sub(eps, x0), nil
}

// RectifiedFlowLoss is the velocity loss of rectified flow (Liu et al., 2022): per sample the mean over
// dims of (v_θ − u)², and L = Σ per-sample / count (count = the mini-batch's number
// of samples, a scalar node; nil = N). Aux: per_sample_loss.
func RectifiedFlowLoss(vPred, target, count *Node) (Result, error) {
	if vPred == nil || target == nil || !sameDims(vPred, target) || vPred.Rank() < 1 {
		return Result{}, fmt.Errorf("rectified flow loss: v_pred and target must be [N, ...] of one shape")
	}
	perSampleLoss := meanOverDims(Square(Sub(vPred, StopGradient(toDType(target, vPred)))))
	res := newResult(pairMean(perSampleLoss, count))
	res.Aux["per_sample_loss"] = perSampleLoss
	return res, nil
}

// SDEConfig configures the SDE step of Flow-GRPO (Liu et al., 2025).
type SDEConfig struct {
	// NoiseLevel is a in s_σ = a·sqrt(σ/(1 − σ)); default 0.7.
	NoiseLevel float64
	// SigmaMax replaces σ in the denominator where σ = 1 (flow_grpo uses the
	// schedule's largest σ below 1); required, in (0, 1).
	SigmaMax float64
}

// SDEStep is one Gaussian SDE step of Flow-GRPO (Liu et al., 2025), per sample.
type SDEStep struct {
	Mean       *Node // μ [N, ...]
	Std        *Node // s_σ·sqrt(−dt): a scalar or [N, 1, ...]
	SigmaT     *Node // s_σ: a scalar or [N, 1, ...]
	LogProb    *Node // log p(x_next | x) as the mean over dims (flow_grpo) [N]
	LogProbSum *Node // the same summed over dims [N]
}

// SDEStepLogProb evaluates the SDE step of Flow-GRPO (Liu et al., 2025) for states x, model
// velocities v (which receive the gradient) and next states xNext ([N, ...]), with
// σ and σ_next scalars or [N] (σ_next < σ, σ > 0):
// dt = σ_next − σ, s_σ = a·sqrt(σ/(1 − σ)), μ = x + [v + s_σ²/(2σ)·(x + (1 − σ)v)]·dt,
// std = s_σ·sqrt(−dt), log p = mean_dims[−(x_next − μ)²/(2 std²) − log std − ½ log 2π].
// s_σ²/(2σ) is computed as a²/(2(1 − σ)), equal for σ > 0, so no division by σ occurs.
func SDEStepLogProb(x, v, xNext, sigma, sigmaNext *Node, cfg SDEConfig) (SDEStep, error) {
	const what = "sde step"
	if cfg.NoiseLevel == 0 {
		cfg.NoiseLevel = 0.7
	}
	if cfg.NoiseLevel < 0 || cfg.SigmaMax <= 0 || cfg.SigmaMax >= 1 {
		return SDEStep{}, fmt.Errorf("%s: need noise_level >= 0 and sigma_max in (0, 1), got %g, %g",
			what, cfg.NoiseLevel, cfg.SigmaMax)
	}
	if x == nil || v == nil || xNext == nil || !sameDims(x, v) || !sameDims(x, xNext) || x.Rank() < 1 {
		return SDEStep{}, fmt.Errorf("%s: x, v and x_next must be [N, ...] of one shape", what)
	}
	x = StopGradient(toDType(x, v))
	xNext = StopGradient(toDType(xNext, v))
	s, err := perSample(what, "sigma", StopGradient(sigma), v)
	if err != nil {
		return SDEStep{}, err
	}
	sNext, err := perSample(what, "sigma_next", StopGradient(sigmaNext), v)
	if err != nil {
		return SDEStep{}, err
	}
	a := cfg.NoiseLevel
	dt := Sub(sNext, s)
	sDen := Where(GreaterOrEqual(s, OnesLike(s)), scalar(s, cfg.SigmaMax), s)
	oneMinusDen := OneMinus(sDen)
	sigmaT := MulScalar(Sqrt(Div(s, oneMinusDen)), a)
	drift := Mul(Div(scalar(s, a*a/2), oneMinusDen), Add(x, Mul(OneMinus(s), v)))
	mean := Add(x, Mul(Add(v, drift), dt))
	std := Mul(sigmaT, Sqrt(Neg(dt)))
	logpEl := Sub(Sub(Neg(Div(Square(Sub(xNext, mean)), MulScalar(Square(std), 2))), Log(std)),
		scalar(v, 0.5*math.Log(2*math.Pi)))
	// Broadcast scalar-σ terms to the full shape before averaging over dims.
	logpEl = Add(logpEl, ZerosLike(v))
	logp := meanOverDims(logpEl)
	dims := 1
	for _, d := range v.Shape().Dimensions[1:] {
		dims *= d
	}
	return SDEStep{Mean: mean, Std: std, SigmaT: sigmaT, LogProb: logp, LogProbSum: MulScalar(logp, float64(dims))}, nil
}

// FlowGRPOLoss is Flow-GRPO's policy loss (Liu et al., 2025): PPO (Schulman et al., 2017; ε = 1e-4 by
// default) with ρ = exp(log p_θ − log p_old) per (sample, step), averaged over all
// entries. logp, oldLogp and advantages are vectors with one entry per (sample,
// step); count optionally gives the mini-batch's number of entries (nil = len).
// Advantages are already group-normalised and clipped to [−5, 5] by the estimator.
func FlowGRPOLoss(logp, oldLogp, advantages, count *Node, cfg PPOConfig) (Result, error) {
	if err := checkVectors("flow-grpo", []string{"logp", "old_logp", "advantages"}, logp, oldLogp, advantages); err != nil {
		return Result{}, err
	}
	n := logp.Shape().Dimensions[0]
	col := func(x *Node) *Node { return Reshape(x, n, 1) }
	if count == nil {
		count = scalar(logp, float64(n))
	}
	den := &Denominators{Tokens: count}
	return PPO(PolicyBatch{
		LogProbs:    col(logp),
		OldLogProbs: col(oldLogp),
		Advantages:  col(advantages),
		Mask:        OnesLike(col(logp)),
	}, cfg, Reducer{Mode: AggTokenMean, Denominators: den})
}
