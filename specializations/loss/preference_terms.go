package loss

import (
	"fmt"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// PairTerm names one term of a composed preference loss (E). A recipe lists terms with
// weights, as TRL's DPOConfig loss_type list with loss_weights: loss = Σ_k w_k · L_k, each
// L_k reduced on its own (a mean over pairs, or the sft token mean), so RPO is
// [sigmoid, sft] with weights [1, α] and needs no code of its own.
type PairTerm string

// The terms. sigmoid, hinge and ipo are DPO's (loss.DPO); simpo and orpo are the
// reference-free losses of their own specializations; sft is the NLL of the chosen answers.
const (
	TermSigmoid PairTerm = "sigmoid"
	TermHinge   PairTerm = "hinge"
	TermIPO     PairTerm = "ipo"
	TermSimPO   PairTerm = "simpo"
	TermORPO    PairTerm = "orpo"
	// TermSFT is −Σ_pairs P_c / Σ_pairs n_c: the token-mean NLL over every chosen
	// completion token of the mini-batch (TRL's "sft" loss type and its rpo_alpha term:
	// cross-entropy over the chosen half's completion tokens, one mean for the batch).
	// Empty completions give 0.
	TermSFT PairTerm = "sft"
)

// pairTerms are the known terms, in the order errors list them.
var pairTerms = []PairTerm{TermSigmoid, TermHinge, TermIPO, TermSFT, TermSimPO, TermORPO}

// NeedsReference reports whether the term reads the reference log-probs R_c, R_r.
func (t PairTerm) NeedsReference() bool {
	return t == TermSigmoid || t == TermHinge || t == TermIPO
}

// WeightedTerm is one term of a composed preference loss with its weight w ≥ 0.
type WeightedTerm struct {
	Term   PairTerm
	Weight float64
}

// PreferenceConfig configures a composed preference loss: its terms and the constants of
// the losses they name.
type PreferenceConfig struct {
	Terms []WeightedTerm
	// DPO configures the sigmoid, hinge and ipo terms (its Type is the term's).
	DPO DPOConfig
	// SimPO configures the simpo term.
	SimPO SimPOConfig
	// ORPOLambda is λ of the orpo term.
	ORPOLambda float64
}

// Terms pairs names with weights: no weights means every weight 1 (TRL's default), else
// one weight ≥ 0 per name. An unknown name, a repeated one or a count mismatch is an error.
func Terms(names []string, weights []float64) ([]WeightedTerm, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("preference loss: no terms")
	}
	if len(weights) != 0 && len(weights) != len(names) {
		return nil, fmt.Errorf("preference loss: %d weights for %d terms %v: give one weight per term, or none for all 1",
			len(weights), len(names), names)
	}
	out := make([]WeightedTerm, len(names))
	for i, n := range names {
		t := PairTerm(n)
		if !slices.Contains(pairTerms, t) {
			return nil, fmt.Errorf("preference loss: unknown term %q (known: %s)", n, joinTerms(pairTerms))
		}
		for _, prev := range out[:i] {
			if prev.Term == t {
				return nil, fmt.Errorf("preference loss: term %q appears twice", n)
			}
		}
		w := 1.0
		if len(weights) != 0 {
			w = weights[i]
		}
		if w < 0 {
			return nil, fmt.Errorf("preference loss: weight %g of term %q must be >= 0", w, n)
		}
		out[i] = WeightedTerm{Term: t, Weight: w}
	}
	return out, nil
}

func joinTerms(ts []PairTerm) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// Preference is the composed loss Σ_k w_k · L_k of cfg.Terms. One term with weight 1 is
// exactly that loss: its value, metrics and aux. With several terms the metrics are the
// union of the terms' (the DPO terms share accuracy, margins and rewards, which depend on h
// and β only; the first term that reports a name gives it) plus loss_<term>, each term's
// unweighted value; aux are the first term's.
func Preference(b PairBatch, cfg PreferenceConfig) (Result, error) {
	if len(cfg.Terms) == 0 {
		return Result{}, fmt.Errorf("preference loss: no terms")
	}
	var out Result
	for i, wt := range cfg.Terms {
		res, err := pairTerm(b, wt.Term, cfg)
		if err != nil {
			return Result{}, err
		}
		if len(cfg.Terms) == 1 && wt.Weight == 1 {
			return res, nil
		}
		weighted := MulScalar(res.Loss, wt.Weight)
		if i == 0 {
			out = newResult(weighted)
			out.Aux = res.Aux
		} else {
			out.Loss = Add(out.Loss, weighted)
		}
		for k, v := range res.Metrics {
			if _, ok := out.Metrics[k]; !ok {
				out.Metrics[k] = v
			}
		}
		out.Metrics["loss_"+string(wt.Term)] = StopGradient(res.Loss)
	}
	return out, nil
}

// pairTerm is one term's own loss.
func pairTerm(b PairBatch, t PairTerm, cfg PreferenceConfig) (Result, error) {
	switch t {
	case TermSigmoid, TermHinge, TermIPO:
		c := cfg.DPO
		c.Type = DPOType(t)
		return DPO(b, c)
	case TermSimPO:
		return SimPO(b, cfg.SimPO)
	case TermORPO:
		return ORPO(b, cfg.ORPOLambda)
	case TermSFT:
		return ChosenNLL(b)
	}
	return Result{}, fmt.Errorf("preference loss: unknown term %q (known: %s)", t, joinTerms(pairTerms))
}

// ChosenNLL is the sft term: −Σ P_c / N_c with N_c the chosen completion tokens of the
// mini-batch (b.ChosenTokens, else Σ n_c of this batch), so micro-batches add up to the
// mini-batch's token mean. Metric: nll_loss (its value). Aux: nll_chosen (−P_c per pair).
func ChosenNLL(b PairBatch) (Result, error) {
	if err := checkVectors("sft", []string{"policy_chosen_logps", "chosen_lengths"},
		b.PolicyChosen, b.ChosenLengths); err != nil {
		return Result{}, err
	}
	pc := b.PolicyChosen
	n := b.ChosenTokens
	if n == nil {
		n = ReduceAllSum(toDType(b.ChosenLengths, pc))
	}
	nll := Mul(Neg(ReduceAllSum(pc)), safeRecip(StopGradient(toDType(n, pc))))
	res := newResult(nll)
	res.Aux["nll_chosen"] = StopGradient(Neg(pc))
	res.Metrics["nll_loss"] = StopGradient(nll)
	return res, nil
}
