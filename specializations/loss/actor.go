package loss

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// Entropy returns the categorical entropy H = −Σ_v p_v·log p_v of softmax(logits)
// over the last axis, e.g. [B,T,V] → [B,T]. It is computed from the
// log-softmax (max-shifted logsumexp), so large logits do not overflow, and
// −Inf logits (banned tokens) contribute 0.
func Entropy(logits *Node) *Node {
	logp := LogSoftmax(logits, -1)
	p := Exp(logp)
	// A −Inf logit (a banned token) has p = 0: use 0·0 there instead of 0·(−Inf).
	support := GreaterThan(p, ZerosLike(p))
	return Neg(ReduceSum(Mul(p, Where(support, logp, ZerosLike(logp))), -1))
}

// ActorTerms are the optional extra terms of the full actor objective.
// Coefficients are scalar nodes so that hot-reloaded or scheduled values can be fed
// without recompiling; a nil tensor or coefficient turns its term off.
type ActorTerms struct {
	KL          *Node // per-token KL estimate [B,T] (see KL)
	KLCoef      *Node // kl_loss_coef
	Entropy     *Node // per-token entropy [B,T] (see Entropy)
	EntropyCoef *Node // entropy_coef
}

// ActorLoss is the full actor objective:
// L_actor = L_pg + kl_loss_coef·agg(KL) − entropy_coef·agg(H), all aggregated with r
// over mask. It keeps pg's metrics and aux and adds "pg_loss", "kl_loss" and
// "entropy" (the aggregated terms before their coefficients).
func ActorLoss(pg Result, terms ActorTerms, mask *Node, r Reducer) (Result, error) {
	if pg.Loss == nil {
		return Result{}, fmt.Errorf("actor loss: policy loss is missing")
	}
	res := newResult(pg.Loss)
	for k, v := range pg.Metrics {
		res.Metrics[k] = v
	}
	for k, v := range pg.Aux {
		res.Aux[k] = v
	}
	res.Metrics["pg_loss"] = pg.Loss
	add := func(name string, term, coef *Node, sign float64) error {
		if term == nil || coef == nil {
			return nil
		}
		if coef.Rank() != 0 {
			return fmt.Errorf("actor loss: %s coefficient must be a scalar, got shape %s", name, coef.Shape())
		}
		if err := checkTokens("actor loss", []string{name, "mask"}, term, mask); err != nil {
			return err
		}
		l, err := r.Reduce(term, mask)
		if err != nil {
			return fmt.Errorf("actor loss: %s: %w", name, err)
		}
		res.Metrics[name] = l
		res.Loss = Add(res.Loss, MulScalar(Mul(toDType(coef, l), l), sign))
		return nil
	}
	if err := add("kl_loss", terms.KL, terms.KLCoef, 1); err != nil {
		return Result{}, err
	}
	if err := add("entropy", terms.Entropy, terms.EntropyCoef, -1); err != nil {
		return Result{}, err
	}
	return res, nil
}
