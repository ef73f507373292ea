package runtime

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
)

// AdamW holds the hyper-parameters of AdamW (Loshchilov & Hutter, 2019) with PyTorch semantics:
// decoupled weight decay scaled by the scheduled lr, bias-corrected moments, eps added to
// sqrt(v̂).
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	// NoDecayNormsAndBiases excludes rank-1 tensors (norm weights, biases) from weight decay.
	NoDecayNormsAndBiases bool
}

// DefaultAdamW returns PyTorch's AdamW defaults with verl's weight decay of 0.01.
func DefaultAdamW() AdamW { return AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01} }

// Validate checks the hyper-parameters.
func (a AdamW) Validate() error {
	if a.Beta1 < 0 || a.Beta1 >= 1 || a.Beta2 < 0 || a.Beta2 >= 1 || a.Eps <= 0 || a.WeightDecay < 0 {
		return fmt.Errorf("adamw: beta1 %g, beta2 %g must be in [0,1), eps %g > 0, weight decay %g ≥ 0",
			a.Beta1, a.Beta2, a.Eps, a.WeightDecay)
	}
	return nil
}

// biasCorrections returns 1−β1^t and 1−β2^t for the 1-based step t, computed in float64 on the
// host (as PyTorch does) and fed to the graph as scalars.
func (a AdamW) biasCorrections(t int) (bc1, bc2 float64) {
	return 1 - math.Pow(a.Beta1, float64(t)), 1 - math.Pow(a.Beta2, float64(t))
}

// update returns the new parameter and moments for one AdamW step. lr, bc1 and bc2 are scalar
// nodes of the parameter's dtype.
func (a AdamW) update(p, g, m, v, lr, bc1, bc2 *Node, decay bool) (newP, newM, newV *Node) {
	if decay && a.WeightDecay != 0 {
		p = Mul(p, OneMinus(MulScalar(lr, a.WeightDecay)))
	}
	newM = Add(MulScalar(m, a.Beta1), MulScalar(g, 1-a.Beta1))
	newV = Add(MulScalar(v, a.Beta2), MulScalar(Square(g), 1-a.Beta2))
	denom := AddScalar(Div(Sqrt(newV), Sqrt(bc2)), a.Eps)
	newP = Sub(p, Mul(Div(lr, bc1), Div(newM, denom)))
	return newP, newM, newV
}

// clipCoefficient returns min(1, maxNorm/(norm+1e-6)) (global-norm clipping, as torch's clip_grad_norm_), or 1 when clipping
// is off (maxNorm ≤ 0).
func clipCoefficient(norm *Node, maxNorm float64) *Node {
	one := OnesLike(norm)
	if maxNorm <= 0 {
		return one
	}
	return Min(one, Div(Scalar(norm.Graph(), norm.DType(), maxNorm), AddScalar(norm, 1e-6)))
}

// globalNorm is sqrt(Σ over all tensors of Σ g²).
func globalNorm(grads []*Node) *Node { return Sqrt(sumOfSquares(grads)) }

// sumOfSquares is Σ over all tensors of Σ g² (under FSDP, of a device's shards: see fsdp.go).
func sumOfSquares(grads []*Node) *Node {
	var sum *Node
	for _, g := range grads {
		s := ReduceAllSum(Square(g))
		if sum == nil {
			sum = s
		} else {
			sum = Add(sum, s)
		}
	}
	return sum
}
