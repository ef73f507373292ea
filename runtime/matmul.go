package runtime

import (
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// GoMLX v0.26.0's reverse-mode gradients of Dot and DotGeneral broadcast the adjoint against the
// other operand and reduce, materialising an O(M·N·K) tensor per matmul (fixed upstream after
// v0.26.0, gomlx PR #428). A 4 M-parameter model then needs tens of GB per train step. This file
// replaces both gradients in graph.VJPRegistration (a registry GoMLX exports for this purpose)
// with the textbook ones, dA = dC·Bᵀ and dB = Aᵀ·dC, each a single DotGeneral.
//
// The DotGeneral axes live in an unexported struct, so DotGeneralWithAxes records them for
// the nodes it builds (weakly keyed, so graphs are still garbage collected); DotGenerals built
// elsewhere (Einsum, layers) have their axes read from the node's description, and anything that
// cannot be read falls back to GoMLX's own gradient.

type dotAxes struct {
	lhsContracting, lhsBatch, rhsContracting, rhsBatch []int
}

var (
	dotAxesMu       sync.Mutex
	dotAxesRegistry = map[weak.Pointer[Node]]dotAxes{}
	upstreamDotVJP  VJP
)

func init() {
	upstreamDotVJP = VJPRegistration[NodeTypeDotGeneral]
	VJPRegistration[NodeTypeDotGeneral] = dotGeneralGrad
	VJPRegistration[NodeTypeDot] = dotGrad
}

// DotGeneralWithAxes is graph.DotGeneral (same arguments and result) with the axes recorded so
// that its gradient is computed with two DotGenerals. Axes must be non-negative.
func DotGeneralWithAxes(lhs *Node, lhsContracting, lhsBatch []int, rhs *Node, rhsContracting, rhsBatch []int) *Node {
	out := DotGeneral(lhs, lhsContracting, lhsBatch, rhs, rhsContracting, rhsBatch)
	key := weak.Make(out)
	dotAxesMu.Lock()
	dotAxesRegistry[key] = dotAxes{slices.Clone(lhsContracting), slices.Clone(lhsBatch),
		slices.Clone(rhsContracting), slices.Clone(rhsBatch)}
	dotAxesMu.Unlock()
	runtime.AddCleanup(out, func(k weak.Pointer[Node]) {
		dotAxesMu.Lock()
		delete(dotAxesRegistry, k)
		dotAxesMu.Unlock()
	}, key)
	return out
}

// Linear applies a weight stored [out, in] (Hugging Face orientation) to the last axis of x:
// x[..., in] → [..., out], i.e. x·Wᵀ.
func Linear(x, w *Node) *Node {
	return DotGeneralWithAxes(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil)
}

// LinearIn is Linear computed in the compute dtype dt (see DotGeneralIn).
func LinearIn(dt dtypes.DType, x, w *Node) *Node {
	return DotGeneralIn(dt, x, []int{x.Rank() - 1}, nil, w, []int{1}, nil)
}

// DotGeneralIn is DotGeneralWithAxes computed in the compute dtype dt, PyTorch autocast's way:
// with dt BFloat16 both operands are converted to bfloat16, multiplied in bfloat16 (the
// backends accumulate in float32 and round the product to bfloat16) and the product converted
// back to the operands' dtype at once, so that what follows (norms, softmax, residuals,
// losses) stays float32. The gradient flows through the conversions: the backward products
// are bfloat16 too, and the gradients reach float32 weights as float32. dt InvalidDType (a
// model's default) or the operands' own dtype is the plain product.
func DotGeneralIn(dt dtypes.DType, lhs *Node, lhsContracting, lhsBatch []int, rhs *Node, rhsContracting, rhsBatch []int) *Node {
	if dt == dtypes.InvalidDType || (dt == lhs.DType() && dt == rhs.DType()) {
		return DotGeneralWithAxes(lhs, lhsContracting, lhsBatch, rhs, rhsContracting, rhsBatch)
	}
	out := lhs.DType()
	return ConvertDType(DotGeneralWithAxes(ConvertDType(lhs, dt), lhsContracting, lhsBatch,
		ConvertDType(rhs, dt), rhsContracting, rhsBatch), out)
}

var dotGeneralDesc = regexp.MustCompile(`lhsContractingAxes=\[([0-9 ]*)\], lhsBatchAxes=\[([0-9 ]*)\], rhs=\[#\d+\], rhsContractingAxes=\[([0-9 ]*)\], rhsBatchAxes=\[([0-9 ]*)\]`)

func parseInts(s string) ([]int, bool) {
	fields := strings.Fields(s)
	out := make([]int, 0, len(fields))
	for _, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

func lookupDotAxes(node *Node) (dotAxes, bool) {
	dotAxesMu.Lock()
	axes, ok := dotAxesRegistry[weak.Make(node)]
	dotAxesMu.Unlock()
	if ok {
		return axes, true
	}
	m := dotGeneralDesc.FindStringSubmatch(node.String())
	if m == nil {
		return dotAxes{}, false
	}
	var all [4][]int
	for i := range all {
		v, ok := parseInts(m[i+1])
		if !ok {
			return dotAxes{}, false
		}
		all[i] = v
	}
	return dotAxes{all[0], all[1], all[2], all[3]}, true
}

// crossAxes lists the axes of an operand of the given rank that are neither contracted nor batch.
func crossAxes(rank int, contracting, batch []int) []int {
	var out []int
	for a := range rank {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			out = append(out, a)
		}
	}
	return out
}

func iotaFrom(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// rankAmongSorted returns the position of v among the sorted values of set.
func rankAmongSorted(set []int, v int) int {
	r := 0
	for _, s := range set {
		if s < v {
			r++
		}
	}
	return r
}

// operandGrad computes the gradient with respect to one operand ("this") of a DotGeneral whose
// output adjoint is v. The output's axes are [batch..., lhsCross..., rhsCross...]; contracting v
// over the other operand's cross axes against the other operand gives
// [batch..., thisCross..., otherContracting(sorted)...], which is then permuted into this
// operand's axis order.
func operandGrad(v *Node, thisRank int, thisContracting, thisBatch []int, vOtherCross []int,
	other *Node, otherContracting, otherBatch []int) *Node {
	nb := len(thisBatch)
	otherCross := crossAxes(other.Rank(), otherContracting, otherBatch)
	g := DotGeneral(v, vOtherCross, iotaFrom(0, nb), other, otherCross, otherBatch)
	thisCross := crossAxes(thisRank, thisContracting, thisBatch)
	perm := make([]int, thisRank)
	for i, a := range thisBatch {
		perm[a] = i
	}
	for j, a := range thisCross {
		perm[a] = nb + j // cross axes keep their relative order in the result.
	}
	for k, a := range thisContracting {
		perm[a] = nb + len(thisCross) + rankAmongSorted(otherContracting, otherContracting[k])
	}
	identity := true
	for i, p := range perm {
		if i != p {
			identity = false
		}
	}
	if identity {
		return g
	}
	return TransposeAllAxes(g, perm...)
}

func dotGeneralGrad(node *Node, vjpOutputs []*Node, outputShape shapes.Shape) []*Node {
	axes, ok := lookupDotAxes(node)
	inputs := node.Inputs()
	if !ok || len(inputs) != 2 {
		return upstreamDotVJP(node, vjpOutputs, outputShape)
	}
	lhs, rhs := inputs[0], inputs[1]
	v := vjpOutputs[0]
	nb := len(axes.lhsBatch)
	nlc := lhs.Rank() - len(axes.lhsContracting) - nb
	nrc := rhs.Rank() - len(axes.rhsContracting) - nb
	vLhsCross := iotaFrom(nb, nlc)
	vRhsCross := iotaFrom(nb+nlc, nrc)
	dLhs := operandGrad(v, lhs.Rank(), axes.lhsContracting, axes.lhsBatch, vRhsCross,
		rewiden(rhs), axes.rhsContracting, axes.rhsBatch)
	// For the rhs the roles swap: the result of contracting v over the lhs cross axes has the
	// rhs cross axes first.
	dRhs := operandGrad(v, rhs.Rank(), axes.rhsContracting, axes.rhsBatch, vLhsCross,
		rewiden(lhs), axes.lhsContracting, axes.lhsBatch)
	return []*Node{dLhs, dRhs}
}

// rewiden returns, for an operand that widens a narrower tensor (a bfloat16-held frozen
// weight read by a float32 product, lora_base.go), the same conversion built anew for the
// backward pass: the forward's widened copy is then freed after the forward product instead
// of living until the backward one, and the narrow tensor, half its size, is what stays.
// Any other operand is returned as is.
func rewiden(x *Node) *Node {
	if x.Type() != NodeTypeConvertDType {
		return x
	}
	in := x.Inputs()[0]
	if in.DType().Size() >= x.DType().Size() {
		return x
	}
	return ConvertDType(in, x.DType())
}

// dotGrad is the gradient of graph.Dot (vector·vector, matrix·vector, matrix·matrix).
func dotGrad(node *Node, vjpOutputs []*Node, _ shapes.Shape) []*Node {
	a, b := node.Inputs()[0], node.Inputs()[1]
	v := vjpOutputs[0]
	switch {
	case a.Rank() == 1 && b.Rank() == 1:
		return []*Node{Mul(v, b), Mul(v, a)}
	case a.Rank() == 2 && b.Rank() == 1:
		// c[i] = Σ_j a[i,j] b[j]: da = v ⊗ b, db = aᵀ·v.
		return []*Node{Mul(InsertAxes(v, -1), InsertAxes(b, 0)), DotGeneral(a, []int{0}, nil, v, []int{0}, nil)}
	default:
		// c[i,k] = Σ_j a[i,j] b[j,k]: da = v·bᵀ, db = aᵀ·v.
		return []*Node{DotGeneral(v, []int{1}, nil, b, []int{1}, nil), DotGeneral(a, []int{0}, nil, v, []int{0}, nil)}
	}
}
