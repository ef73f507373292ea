package loss

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// Result is what every graph loss returns.
type Result struct {
	// Loss is the reduced scalar loss (minimised).
	Loss *Node
	// Metrics are scalar nodes for logging (names as in verl, e.g. "clipfrac").
	// Masked means are contributions over the reducer's token denominator, so with
	// mini-batch denominators the micro-batches' values add up to the batch metric.
	Metrics map[string]*Node
	// Aux are non-scalar diagnostics: per-token losses ("token_loss", zero at masked
	// positions), ratios, per-pair or per-example losses.
	Aux map[string]*Node
}

func newResult(loss *Node) Result {
	return Result{Loss: loss, Metrics: map[string]*Node{}, Aux: map[string]*Node{}}
}

// scalar is a constant with x's dtype.
func scalar(x *Node, v float64) *Node { return Scalar(x.Graph(), x.DType(), v) }

// asMask converts a 0/1 mask (float, int or bool) to a boolean "token counts" tensor.
func asMask(mask *Node) *Node {
	if mask.DType() == dtypes.Bool {
		return mask
	}
	return GreaterThan(mask, ScalarZero(mask.Graph(), mask.DType()))
}

// maskOf returns the mask as 0/1 in dtype like's dtype, without gradient.
func maskOf(mask, like *Node) *Node {
	return StopGradient(Where(asMask(mask), OnesLike(like), ZerosLike(like)))
}

// keep returns x where mask is set and exactly 0 elsewhere; used instead of x·mask
// so that an Inf or NaN at a masked position cannot become NaN (0·Inf).
func keep(x, mask *Node) *Node { return Where(asMask(mask), x, ZerosLike(x)) }

// safeRecip returns 1/x where x > 0 and 0 elsewhere (denominators that are counts:
// an empty count gives a zero loss and zero gradient, never NaN).
func safeRecip(x *Node) *Node {
	pos := GreaterThan(x, ZerosLike(x))
	return Where(pos, Reciprocal(Where(pos, x, OnesLike(x))), ZerosLike(x))
}

// clampNoGrad clips x to [lo, hi]; where a bound is active the output is the
// constant bound, so no gradient reaches x (the gradient is 0 where clamped, as in PyTorch's clamp).
func clampNoGrad(x *Node, lo, hi float64) *Node {
	return Min(Max(x, scalar(x, lo)), scalar(x, hi))
}

// logSigmoid is log σ(z) = −softplus(−z) (graph.Softplus is the stable
// max(x, 0) + log1p(e^{−|x|}), with gradient σ(x), also at 0).
func logSigmoid(z *Node) *Node { return Neg(Softplus(Neg(z))) }

// expm1 is e^x − 1 computed with the accurate Expm1 op, with the gradient e^x
// attached by hand (GoMLX v0.26 has no VJP for Expm1): value sg(expm1(x)) plus
// e^x − sg(e^x), which is exactly 0 in value and e^x in gradient.
func expm1(x *Node) *Node {
	e := Exp(x)
	return Add(StopGradient(Expm1(x)), Sub(e, StopGradient(e)))
}

// log1mexp is log(1 − e^a) for a < 0, stable on both sides of −ln 2
// (Mächler 2012): log(−expm1(a)) near 0, log1p(−e^a) far from it.
func log1mexp(a *Node) *Node {
	near := GreaterThan(a, scalar(a, -0.6931471805599453))
	aNear := Where(near, a, scalar(a, -1)) // keep the unselected branch finite
	aFar := Where(near, scalar(a, -1), a)
	return Where(near, Log(Neg(expm1(aNear))), Log1p(Neg(Exp(aFar))))
}

// checkTokens verifies that the named nodes exist, are float, rank 2 and share a
// shape with the first one.
func checkTokens(what string, names []string, nodes ...*Node) error {
	var ref *Node
	for i, n := range nodes {
		if n == nil {
			return fmt.Errorf("%s: input %q is missing", what, names[i])
		}
		if i == 0 {
			ref = n
			if !n.DType().IsFloat() {
				return fmt.Errorf("%s: input %q must be float, got %s", what, names[i], n.DType())
			}
			if n.Rank() != 2 {
				return fmt.Errorf("%s: input %q must be [rows, tokens], got shape %s", what, names[i], n.Shape())
			}
			continue
		}
		if !sameDims(n, ref) {
			return fmt.Errorf("%s: input %q has shape %s, want dimensions of %q %v",
				what, names[i], n.Shape(), names[0], ref.Shape().Dimensions)
		}
	}
	return nil
}

func sameDims(a, b *Node) bool {
	if a.Rank() != b.Rank() {
		return false
	}
	for i := range a.Rank() {
		if a.Shape().Dimensions[i] != b.Shape().Dimensions[i] {
			return false
		}
	}
	return true
}

// toDType converts x to like's dtype when they differ (e.g. a float32 count fed to
// a float64 graph).
func toDType(x, like *Node) *Node {
	if x.DType() == like.DType() {
		return x
	}
	return ConvertDType(x, like.DType())
}
