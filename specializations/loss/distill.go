package loss

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// SFT is the supervised cross-entropy: ℓ[b,t] = −logp_target[b,t] on
// completion tokens (mask), reduced with r (default token-mean; tinker's
// cross_entropy is sum). Metric: nll (masked token mean). Aux: token_loss.
func SFT(targetLogp, mask *Node, r Reducer) (Result, error) {
	if err := checkTokens("sft", []string{"target_logp", "mask"}, targetLogp, mask); err != nil {
		return Result{}, err
	}
	nll := Neg(keep(targetLogp, mask))
	l, err := r.Reduce(nll, mask)
	if err != nil {
		return Result{}, fmt.Errorf("sft: %w", err)
	}
	res := newResult(l)
	res.Aux["token_loss"] = nll
	res.Metrics["nll"] = StopGradient(r.tokenMean(nll, mask))
	return res, nil
}

// OPDConfig configures the advantages of on-policy distillation (Agarwal et al., 2024).
type OPDConfig struct {
	KLCoef   float64 // κ (kl_penalty_coef), default 1
	Discount float64 // γ_kl (kl_discount_factor) in [0, 1], default 0 (each token credited alone)
	// Clip bounds A_t to [ClipMin, ClipMax] when set (default: no clip).
	Clip             bool
	ClipMin, ClipMax float64
}

// OPDAdvantages computes the precomputed per-token advantages of on-policy
// distillation (Agarwal et al., 2024) on the host: a_t = κ(lt_t − ls_t)·mask_t,
// A_t = Σ_{j≥t} γ^{j−t} a_j (masked positions add 0 but consume a discount step),
// optionally clipped, then masked, plus env (any reward advantage already present;
// nil = none). The loss is then tinker's importance_sampling with
// sampler_logp = ls, reduction sum.
func OPDAdvantages(teacherLogp, samplerLogp, mask, env [][]float64, cfg OPDConfig) ([][]float64, error) {
	if cfg.Discount < 0 || cfg.Discount > 1 {
		return nil, fmt.Errorf("opd: kl_discount_factor must be in [0, 1], got %g", cfg.Discount)
	}
	if cfg.Clip && cfg.ClipMin > cfg.ClipMax {
		return nil, fmt.Errorf("opd: clip_min %g > clip_max %g", cfg.ClipMin, cfg.ClipMax)
	}
	if err := sameHostShape("opd", teacherLogp, samplerLogp, mask); err != nil {
		return nil, err
	}
	if env != nil {
		if err := sameHostShape("opd", teacherLogp, env); err != nil {
			return nil, err
		}
	}
	out := make([][]float64, len(teacherLogp))
	for b := range teacherLogp {
		row := make([]float64, len(teacherLogp[b]))
		future := 0.0
		for t := len(row) - 1; t >= 0; t-- {
			a := 0.0
			if mask[b][t] != 0 {
				a = cfg.KLCoef * (teacherLogp[b][t] - samplerLogp[b][t])
			}
			future = a + cfg.Discount*future
			v := future
			if cfg.Clip {
				v = math.Min(math.Max(v, cfg.ClipMin), cfg.ClipMax)
			}
			if mask[b][t] == 0 {
				v = 0
			}
			if env != nil {
				v += env[b][t]
			}
			row[t] = v
		}
		out[b] = row
	}
	return out, nil
}

func sameHostShape(what string, ref [][]float64, others ...[][]float64) error {
	for i, o := range others {
		if len(o) != len(ref) {
			return fmt.Errorf("%s: argument %d has %d rows, want %d", what, i+2, len(o), len(ref))
		}
		for b := range ref {
			if len(o[b]) != len(ref[b]) {
				return fmt.Errorf("%s: argument %d row %d has %d tokens, want %d", what, i+2, b, len(o[b]), len(ref[b]))
			}
		}
	}
	return nil
}

// GKDConfig configures the generalized JSD of GKD (Agarwal et al., 2024).
type GKDConfig struct {
	Beta        float64 // β in [0, 1]: 0 = forward KL(T‖S), 1 = reverse KL(S‖T); default 0.5
	Temperature float64 // τ > 0 applied to both logits; default 1
}

// Check reports a β outside [0, 1] or a τ ≤ 0.
func (c GKDConfig) Check() error {
	if c.Beta < 0 || c.Beta > 1 || c.Temperature <= 0 {
		return fmt.Errorf("gkd: need beta in [0, 1] and temperature > 0, got %g, %g", c.Beta, c.Temperature)
	}
	return nil
}

// GeneralizedJSD is GKD's per-token divergence over full distributions
// (Agarwal et al., 2024): with S = softmax(z_S/τ), T = softmax(z_T/τ), β = 0 gives KL(T‖S), β = 1 gives
// KL(S‖T) (special-cased, not limits), and 0 < β < 1 gives
// β·KL(T‖M) + (1−β)·KL(S‖M) with M = βT + (1−β)S (log M by logsumexp). Logits are
// [B,T,V], mask [B,T]; the teacher gets no gradient. L = agg(D, mask) with r; trl's
// "batchmean" (Σ_valid D / #valid) is token-mean. Aux: token_loss (D).
func GeneralizedJSD(studentLogits, teacherLogits, mask *Node, cfg GKDConfig, r Reducer) (Result, error) {
	if err := cfg.Check(); err != nil {
		return Result{}, err
	}
	if studentLogits == nil || teacherLogits == nil || mask == nil {
		return Result{}, fmt.Errorf("gkd: student logits, teacher logits and mask are required")
	}
	if studentLogits.Rank() != 3 || !sameDims(studentLogits, teacherLogits) {
		return Result{}, fmt.Errorf("gkd: logits must be [B,T,V] of one shape, got %s and %s",
			studentLogits.Shape(), teacherLogits.Shape())
	}
	if mask.Rank() != 2 || mask.Shape().Dimensions[0] != studentLogits.Shape().Dimensions[0] ||
		mask.Shape().Dimensions[1] != studentLogits.Shape().Dimensions[1] {
		return Result{}, fmt.Errorf("gkd: mask %s does not match logits %s", mask.Shape(), studentLogits.Shape())
	}
	d, err := GeneralizedJSDTokens(studentLogits, teacherLogits, cfg)
	if err != nil {
		return Result{}, err
	}
	return ReduceGeneralizedJSD(d, mask, r)
}

// GeneralizedJSDTokens is GeneralizedJSD's divergence at every position, logits [..., V] →
// [...], without mask or reduction: what a chunked head computes one chunk of rows at a time.
func GeneralizedJSDTokens(studentLogits, teacherLogits *Node, cfg GKDConfig) (*Node, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	logS := LogSoftmax(MulScalar(studentLogits, 1/cfg.Temperature), -1)
	logT := LogSoftmax(MulScalar(toDType(teacherLogits, studentLogits), 1/cfg.Temperature), -1)
	return GeneralizedJSDLogProbs(logS, logT, cfg.Beta), nil
}

// ReduceGeneralizedJSD is GeneralizedJSD's loss from the per-token divergences d [B,T]
// (GeneralizedJSDTokens) and mask [B,T]. Aux: token_loss (d, 0 outside the mask).
func ReduceGeneralizedJSD(d, mask *Node, r Reducer) (Result, error) {
	if !sameDims(d, mask) {
		return Result{}, fmt.Errorf("gkd: mask %s does not match the divergences %s", mask.Shape(), d.Shape())
	}
	// Positions outside the mask may hold garbage logits: zero them before reducing.
	d = keep(d, mask)
	l, err := r.Reduce(d, mask)
	if err != nil {
		return Result{}, fmt.Errorf("gkd: %w", err)
	}
	res := newResult(l)
	res.Aux["token_loss"] = d
	return res, nil
}

// klCategorical is KL(P‖Q) = Σ_v P_v(log P_v − log Q_v) over the last axis, from
// log-probabilities; entries with P_v = 0 contribute 0 (no 0·(−Inf)).
func klCategorical(logP, logQ *Node) *Node {
	p := Exp(logP)
	support := GreaterThan(p, ZerosLike(p))
	diff := Where(support, Sub(logP, logQ), ZerosLike(p))
	return ReduceSum(Mul(p, diff), -1)
}

// AggreVaTe is the cost-to-go weighted imitation surrogate of Ross & Bagnell
// (2014). For S states with K candidate actions each: logp and mask are [S,K,T] per-token
// log-probs of each candidate (an action's log-prob is its masked token sum), costs
// [S,K] are the expert's cost-to-go Q*(s, a_k). With b(s) the mean cost over the
// state's candidates (those with at least one token) and w_k = b(s) − Q*(s, a_k),
// ℓ = −Σ_k w_k·log π(a_k|s); each state is a row of the reducer (tokens = K·T), so
// sum and seq-mean-token-sum give Σ_s and mean_s of the per-state loss. Equal costs
// give w = 0 (no signal). Aux: weights [S,K].
func AggreVaTe(logp, mask, costs *Node, r Reducer) (Result, error) {
	if logp == nil || mask == nil || costs == nil {
		return Result{}, fmt.Errorf("aggrevate: logp, mask and costs are required")
	}
	if logp.Rank() != 3 || !sameDims(logp, mask) {
		return Result{}, fmt.Errorf("aggrevate: logp and mask must be [S,K,T] of one shape, got %s and %s",
			logp.Shape(), mask.Shape())
	}
	dims := logp.Shape().Dimensions
	if costs.Rank() != 2 || costs.Shape().Dimensions[0] != dims[0] || costs.Shape().Dimensions[1] != dims[1] {
		return Result{}, fmt.Errorf("aggrevate: costs %s do not match [S,K] of logp %s", costs.Shape(), logp.Shape())
	}
	m := maskOf(mask, logp)
	q := StopGradient(toDType(costs, logp))
	validCand := indicator(GreaterThan(ReduceSum(m, -1), ZerosLike(q)), q)
	baseline := Mul(ReduceSum(Mul(q, validCand), -1), safeRecip(ReduceSum(validCand, -1)))
	w := Mul(Sub(InsertAxes(baseline, -1), q), validCand)
	tokenLoss := Neg(Mul(InsertAxes(w, -1), keep(logp, mask)))
	flatLoss := Reshape(tokenLoss, dims[0], dims[1]*dims[2])
	flatMask := Reshape(m, dims[0], dims[1]*dims[2])
	l, err := r.Reduce(flatLoss, flatMask)
	if err != nil {
		return Result{}, fmt.Errorf("aggrevate: %w", err)
	}
	res := newResult(l)
	res.Aux["weights"] = w
	return res, nil
}

// MixedBatch holds the two token sets of the mixed CE + K3 loss.
// Either set may be absent (nil tensors), which counts as empty.
type MixedBatch struct {
	// Teacher-executed set 𝒯: student log-probs on the teacher's tokens and its mask.
	StudentOnTeacher, TeacherMask *Node
	// Student-executed set 𝒮: student and teacher log-probs on the student's tokens.
	StudentOnStudent, TeacherOnStudent, StudentMask *Node
	// TeacherTokens, StudentTokens optionally give Σ m^𝒯 and Σ m^𝒮 of the whole
	// mini-batch (scalars), for micro-batching; nil = from the masks.
	TeacherTokens, StudentTokens *Node
}

// MixedCEK3Config configures the mixed CE + K3 blend.
type MixedCEK3Config struct {
	// K3Grad is "direct" (the k3 gradient, a forward-KL gradient in expectation)
	// or "k2" (value of k3, gradient of ½(lpS − lpT)², the reverse-KL gradient).
	K3Grad GradForm
	// LogRatioClamp and OutputClamp are the k3 clamps of KL (0 = 20, 10).
	LogRatioClamp, OutputClamp float64
}

// MixedCEK3 is the β-blend of CE and K3:
// L = β·CE + (1−β)·K3 with CE = −Σ m^𝒯·lpS^𝒯 / Σ m^𝒯 and K3 = Σ m^𝒮·k3(lpS, lpT) / Σ m^𝒮
// (each 0 when its set is empty, no renormalisation). beta is a scalar node (fed each
// rollout from BetaAt) and gets no gradient. Metrics: ce, k3, beta. Aux: k3_tokens.
func MixedCEK3(b MixedBatch, beta *Node, cfg MixedCEK3Config) (Result, error) {
	if beta == nil || beta.Rank() != 0 {
		return Result{}, fmt.Errorf("mixed ce+k3: beta must be a scalar node")
	}
	klCfg := KLConfig{Estimator: KLK3, LogRatioClamp: cfg.LogRatioClamp, OutputClamp: cfg.OutputClamp, Grad: cfg.K3Grad}
	var ce, k3, like *Node
	res := Result{Metrics: map[string]*Node{}, Aux: map[string]*Node{}}
	if b.StudentOnTeacher != nil {
		if err := checkTokens("mixed ce+k3", []string{"student_logp_on_teacher_tokens", "teacher_exec_mask"},
			b.StudentOnTeacher, b.TeacherMask); err != nil {
			return Result{}, err
		}
		r := Reducer{Mode: AggTokenMean, Denominators: &Denominators{Tokens: b.TeacherTokens}}
		var err error
		if ce, err = r.Reduce(Neg(keep(b.StudentOnTeacher, b.TeacherMask)), b.TeacherMask); err != nil {
			return Result{}, fmt.Errorf("mixed ce+k3: %w", err)
		}
		like = b.StudentOnTeacher
	}
	if b.StudentOnStudent != nil {
		if err := checkTokens("mixed ce+k3", []string{"student_logp_on_student_tokens", "teacher_logp_on_student_tokens", "student_exec_mask"},
			b.StudentOnStudent, b.TeacherOnStudent, b.StudentMask); err != nil {
			return Result{}, err
		}
		kl, err := KLLoss(b.StudentOnStudent, b.TeacherOnStudent, b.StudentMask, klCfg,
			Reducer{Mode: AggTokenMean, Denominators: &Denominators{Tokens: b.StudentTokens}})
		if err != nil {
			return Result{}, fmt.Errorf("mixed ce+k3: %w", err)
		}
		k3 = kl.Loss
		res.Aux["k3_tokens"] = kl.Aux["kl"]
		if like == nil {
			like = b.StudentOnStudent
		}
	} else if _, err := klCfg.resolved(); err != nil {
		return Result{}, fmt.Errorf("mixed ce+k3: %w", err)
	}
	if like == nil {
		return Result{}, fmt.Errorf("mixed ce+k3: both token sets are missing")
	}
	zero := ScalarZero(like.Graph(), like.DType())
	if ce == nil {
		ce = zero
	}
	if k3 == nil {
		k3 = zero
	}
	bt := StopGradient(toDType(beta, like))
	res.Loss = Add(Mul(bt, ce), Mul(OneMinus(bt), k3))
	res.Metrics["ce"] = ce
	res.Metrics["k3"] = k3
	res.Metrics["beta"] = bt
	return res, nil
}

// BetaSchedule is the linear β decay over rollouts of the mixed CE + K3 blend.
type BetaSchedule struct {
	Start, End    float64 // β_start (default 1), β_end (default 0)
	DecayRollouts int     // K_decay > 0
}

// BetaAt returns β_k = β_start + (β_end − β_start)·min(k/K_decay, 1) for the 0-based
// rollout index k.
func BetaAt(s BetaSchedule, k int) (float64, error) {
	if s.DecayRollouts <= 0 {
		return 0, fmt.Errorf("beta schedule: decay_rollouts must be > 0, got %d", s.DecayRollouts)
	}
	if k < 0 {
		return 0, fmt.Errorf("beta schedule: rollout index must be >= 0, got %d", k)
	}
	frac := math.Min(float64(k)/float64(s.DecayRollouts), 1)
	return s.Start + (s.End-s.Start)*frac, nil
}
