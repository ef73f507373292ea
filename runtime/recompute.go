package runtime

import (
	"errors"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
)

// Checkpoint returns fn(x, params) — a function of an activation x and of weights, whose
// output has x's shape (a residual block) — without keeping fn's intermediate activations for
// the backward pass: the value is computed from x and params with gradients stopped, and a
// custom gradient recomputes fn on them when the adjoint v of the output arrives and
// differentiates that recomputation, ∂(Σ v·fn(x, params))/∂(x, params). Memory held between
// the forward and the backward pass is then x alone, for one more evaluation of fn.
//
// The adjoint reaches the recomputation without a node of many inputs (GoMLX's custom
// gradients are per node): the output is fn's value plus terms that are exactly 0 but whose
// gradients carry v into a custom-gradient identity of x, and a scalar into one of each
// weight. The identity of x is built last, so the backward pass, which runs over nodes in
// reverse order of creation, reaches it before the weights' identities, which return what it
// computed. x enters that identity as x + 0·Σparams[0], which makes it part of the gradient
// whenever the first weight is, even when x itself is not (frozen embeddings); and the
// recomputation reads x + 0·Σv, which makes it wait for v in executors that run nodes as soon
// as their inputs are ready, so that it does not run (and hold its activations) early.
//
// It is exact: the recomputation repeats the same operations on the same inputs. Executors
// that merge identical computations (XLA's CSE) may merge it with the forward value and keep
// the activations after all.
func Checkpoint(x *Node, params []*Node, fn func(x *Node, params []*Node) *Node) *Node {
	stopped := make([]*Node, len(params))
	for i, p := range params {
		stopped[i] = StopGradient(p)
	}
	y := fn(StopGradient(x), stopped)
	if !y.Shape().Equal(x.Shape()) {
		panic(errors.New("Checkpoint: fn's output must have its input's shape"))
	}

	var grads []*Node // ∂/∂x, then ∂/∂params[i]
	pcs := make([]*Node, len(params))
	for i, p := range params {
		pcs[i] = IdentityWithCustomGradient(p, func(_, _ *Node) *Node {
			if grads == nil {
				panic(errors.New("Checkpoint: a weight's gradient was requested before the input's"))
			}
			return grads[1+i]
		})
	}
	anchor := x
	if len(params) > 0 {
		anchor = Add(x, MulScalar(ReduceAllSum(ConvertDType(params[0], x.DType())), 0))
	}
	xc := IdentityWithCustomGradient(anchor, func(xa, v *Node) *Node {
		if grads == nil {
			v = StopGradient(v)
			xr := Add(StopGradient(xa), MulScalar(ReduceAllSum(v), 0))
			wrt := append([]*Node{xr}, params...)
			grads = Gradient(ReduceAllSum(Mul(fn(xr, params), v)), wrt...)
		}
		return grads[0]
	})
	carry := Sub(xc, StopGradient(xc)) // exactly 0, x's shape
	for _, pc := range pcs {
		carry = Add(carry, ConvertDType(ReduceAllSum(Sub(pc, StopGradient(pc))), carry.DType()))
	}
	return Add(y, carry)
}
