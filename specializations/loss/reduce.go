package loss

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// AggMode is a loss aggregation mode (`loss_agg_mode`, as verl's).
type AggMode string

// The aggregation modes. With L = Σ_{b,t} w[b,t]·ℓ[b,t]:
const (
	AggTokenMean           AggMode = "token-mean"              // w = mask / N (the default)
	AggSeqMeanTokenSum     AggMode = "seq-mean-token-sum"      // w = mask / B'
	AggSeqMeanTokenMean    AggMode = "seq-mean-token-mean"     // w = mask / (B'·n_b)
	AggSeqMeanTokenSumNorm AggMode = "seq-mean-token-sum-norm" // w = mask / (B·L_norm) (Dr.GRPO)
	AggSum                 AggMode = "sum"                     // w = mask
)

// AggModes returns every aggregation mode, in the schema's order.
func AggModes() []AggMode {
	return []AggMode{AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm, AggSum}
}

// ParseAggMode returns the mode named s; "" is the default, token-mean.
func ParseAggMode(s string) (AggMode, error) {
	if s == "" {
		return AggTokenMean, nil
	}
	for _, m := range AggModes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown loss_agg_mode %q (want one of %v)", s, AggModes())
}

// Denominators are the aggregation counts as scalar graph nodes: N (mask tokens),
// B' (rows with at least one mask token) and B (rows). When a mini-batch is split into
// micro-batches (or ranks), pass the counts of the whole optimizer-step mini-batch,
// computed on the host (see CountMask), as graph inputs: each micro-batch then adds its
// Σ w·ℓ and the summed micro-batch gradients are the mini-batch gradient. A nil field
// is computed from the mask given to the reducer (right for a single micro-batch).
type Denominators struct {
	Tokens    *Node // N
	Sequences *Node // B'
	Rows      *Node // B
}

// Counts are the host-side values of Denominators for one or more micro-batches.
type Counts struct {
	Tokens    int // N = Σ mask
	Sequences int // B' = #{rows with n_b > 0}
	Rows      int // B
}

// CountMask returns the aggregation counts of a [rows][tokens] mask (non-zero = counts).
func CountMask[T ~float32 | ~float64 | ~int | ~int32 | ~int64 | ~uint8](mask [][]T) Counts {
	c := Counts{Rows: len(mask)}
	for _, row := range mask {
		n := 0
		for _, m := range row {
			if m != 0 {
				n++
			}
		}
		c.Tokens += n
		if n > 0 {
			c.Sequences++
		}
	}
	return c
}

// Reducer aggregates per-token losses into a scalar with the aggregation mode's weights.
// The zero value is token-mean over the given mask.
type Reducer struct {
	// Mode is the aggregation; "" means token-mean.
	Mode AggMode
	// LossScaleFactor is L_norm of seq-mean-token-sum-norm; it must stay constant
	// across training (e.g. the configured max response length). 0 means the padded
	// width T of the token-loss tensor, which is only constant if T is.
	LossScaleFactor float64
	// Denominators of the whole mini-batch; nil (or nil fields) = from the mask.
	Denominators *Denominators
}

func (r Reducer) mode() (AggMode, error) {
	m, err := ParseAggMode(string(r.Mode))
	if err != nil {
		return "", err
	}
	if r.LossScaleFactor < 0 {
		return "", fmt.Errorf("loss_scale_factor must be >= 0, got %g", r.LossScaleFactor)
	}
	return m, nil
}

// counts returns N, B' and B as scalars of like's dtype, from the configured
// denominators or from the mask m (0/1 in like's dtype).
func (r Reducer) counts(m *Node) (tokens, seqs, rows *Node) {
	var d Denominators
	if r.Denominators != nil {
		d = *r.Denominators
	}
	if d.Tokens != nil {
		tokens = StopGradient(toDType(d.Tokens, m))
	} else {
		tokens = ReduceAllSum(m)
	}
	if d.Sequences != nil {
		seqs = StopGradient(toDType(d.Sequences, m))
	} else {
		nb := ReduceSum(m, -1)
		seqs = ReduceAllSum(indicator(GreaterThan(nb, ZerosLike(nb)), nb))
	}
	if d.Rows != nil {
		rows = StopGradient(toDType(d.Rows, m))
	} else {
		rows = scalar(m, float64(m.Shape().Dimensions[0]))
	}
	return tokens, seqs, rows
}

// Weights returns the aggregation weights w[b,t] for a [rows, tokens] mask, in like's dtype.
// The weights carry no gradient and are 0 at masked positions and for empty batches.
func (r Reducer) Weights(mask, like *Node) (*Node, error) {
	mode, err := r.mode()
	if err != nil {
		return nil, err
	}
	if mask.Rank() != 2 || !sameDims(mask, like) {
		return nil, fmt.Errorf("reducer: mask shape %s does not match token tensor %s", mask.Shape(), like.Shape())
	}
	if d := r.Denominators; d != nil {
		for name, n := range map[string]*Node{"tokens": d.Tokens, "sequences": d.Sequences, "rows": d.Rows} {
			if n != nil && n.Rank() != 0 {
				return nil, fmt.Errorf("reducer: denominator %s must be a scalar, got shape %s", name, n.Shape())
			}
		}
	}
	m := maskOf(mask, like)
	tokens, seqs, rows := r.counts(m)
	var w *Node
	switch mode {
	case AggTokenMean:
		w = Mul(m, safeRecip(tokens))
	case AggSeqMeanTokenSum:
		w = Mul(m, safeRecip(seqs))
	case AggSeqMeanTokenMean:
		perRow := safeRecip(ReduceSum(m, -1)) // 1/n_b, 0 for empty rows
		w = Mul(Mul(m, InsertAxes(perRow, -1)), safeRecip(seqs))
	case AggSeqMeanTokenSumNorm:
		lnorm := r.LossScaleFactor
		if lnorm == 0 {
			lnorm = float64(like.Shape().Dimensions[1])
		}
		w = Mul(m, safeRecip(MulScalar(rows, lnorm)))
	case AggSum:
		w = m
	}
	return StopGradient(w), nil
}

// Reduce returns L = Σ w·ℓ of a [rows, tokens] token loss. Masked
// positions contribute neither value nor gradient, whatever they hold; an empty
// mask gives exactly 0 with a zero gradient.
func (r Reducer) Reduce(tokenLoss, mask *Node) (*Node, error) {
	w, err := r.Weights(mask, tokenLoss)
	if err != nil {
		return nil, err
	}
	return ReduceAllSum(keep(Mul(w, tokenLoss), mask)), nil
}

// tokenMean is the masked mean of x over the reducer's token count N: the plain
// masked mean for one micro-batch, or this micro-batch's share of the mini-batch
// mean when mini-batch denominators are configured. Empty → 0.
func (r Reducer) tokenMean(x, mask *Node) *Node {
	m := maskOf(mask, x)
	tokens, _, _ := r.counts(m)
	return Mul(ReduceAllSum(keep(x, mask)), safeRecip(tokens))
}

// indicator is 1 where cond holds and 0 elsewhere, in like's dtype.
func indicator(cond, like *Node) *Node { return Where(cond, OnesLike(like), ZerosLike(like)) }
