package runtime

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Adapter dropout (PEFT's lora_dropout): in training, each adapted projection computes
// x·Wᵀ + s·(drop(x)·Aᵀ)·Bᵀ, where drop zeroes each element of the adapter's input with
// probability p and scales the others by 1/(1−p), a mask of its own per projection; the base
// path sees x whole. Only a trainer's graphs drop (Trainer builds its loss on
// Model.trainingView); scoring, sampling and the reference (adapters off) never do.
//
// The masks must be the same in a run and in its resumption, and the backends have no random
// number op: they are a hash, in int64 arithmetic modulo the prime 2³¹−1, of each element's
// index, the projection (layer, module), the adapters' seed and a counter. The trainer sets the
// counter from its step before each step (Model.beforeTrainStep), and each micro-batch's graph
// advances it by one, so micro-batches and steps draw different masks and a run resumed at
// step k draws what the uninterrupted run drew. A checkpointed layer's recomputation reads
// the same counter and draws the same masks.

// dropoutCounterVar is the scope and name of the model's dropout counter variable.
const dropoutCounterVar = "lora_dropout_counter"

// dropoutPrime is the modulus of the mask hash: products of two residues fit in int64.
const dropoutPrime = 2147483647

// trainingView returns the Model value whose graphs a trainer builds: with adapter dropout,
// a copy that drops; otherwise m itself (so dropout 0 builds exactly the graphs it did).
func trainingView[M Weights](m M) M {
	mm, ok := any(m).(*Model)
	if !ok || mm.lora == nil || mm.lora.cfg.Dropout == 0 {
		return m
	}
	mm.dropoutCounter() // the trainer's graphs read it
	v := *mm
	v.dropping = true
	return any(&v).(M)
}

// beforeTrainStep is called by a trainer before optimizer step step: it sets the dropout
// counter of a model with adapter dropout (see above).
func beforeTrainStep[M Weights](m M, step int) error {
	mm, ok := any(m).(*Model)
	if !ok || mm.lora == nil || mm.lora.cfg.Dropout == 0 {
		return nil
	}
	v := mm.dropoutCounter()
	// 2²⁰ micro-batches per step at most before two steps' counters meet.
	return v.SetValue(tensors.FromScalar(int64(step) << 20))
}

// dropoutCounter returns the model's dropout counter variable, created (at 0) if needed. It
// is not trainable, and lives beside the model's weights so that graphs over the model's
// context find it.
func (m *Model) dropoutCounter() *context.Variable {
	scope := m.scope + "/" + dropoutCounterVar
	if v := m.ctx.GetVariableByScopeAndName(scope, "counter"); v != nil {
		return v
	}
	v := m.ctx.InAbsPath(scope).Checked(false).VariableWithValue("counter", tensors.FromScalar(int64(0)))
	v.SetTrainable(false)
	return v
}

// withDropoutDraw returns, for a dropping model (trainingView), a copy whose graphs read the
// dropout counter of this graph (and advance the variable by one for the next micro-batch);
// otherwise m.
func (m *Model) withDropoutDraw(ctx *context.Context, g *Graph) *Model {
	if !m.dropping || m.adaptersOff {
		return m
	}
	scope := m.scope + "/" + dropoutCounterVar
	v := ctx.GetVariableByScopeAndName(scope, "counter")
	if v == nil {
		panic(fmt.Errorf("lora dropout: the counter variable %s is missing (the trainer creates it)", scope))
	}
	c := v.ValueGraph(g)
	v.SetValueGraph(AddScalar(c, 1))
	d := *m
	d.dropDraw = c
	return &d
}

// adapterInput returns the adapter's input of projection module: x itself, or, in a
// dropping graph, x with the module's dropout mask applied.
func (m *Model) adapterInput(x *Node, module string) *Node {
	if m.dropDraw == nil {
		return x
	}
	p := m.lora.cfg.Dropout
	keep := GreaterOrEqual(dropoutUniform(m.dropDraw, m.lora.seed, moduleSalt(module), x.Shape()), Scalar(x.Graph(), dtypes.Float32, p))
	return Where(keep, MulScalar(x, 1/(1-p)), ZerosLike(x))
}

// moduleSalt numbers a decoder projection module ("model.layers.3.mlp.up_proj") uniquely:
// layer·8 + its index in LoRAModules.
func moduleSalt(module string) int64 {
	var layer int
	kind := moduleKind(module)
	for i, k := range LoRAModules {
		if k == kind {
			_, _ = fmt.Sscanf(module, "model.layers.%d.", &layer)
			return int64(layer)*8 + int64(i)
		}
	}
	return 7
}

// dropoutUniform returns values in [0, 1) of the given shape (float32), one per element: a
// hash of the element's flat index, salt, seed and the counter node c (int64 scalar), in
// int64 arithmetic modulo dropoutPrime. Three rounds (a multiplicative one, a squaring and
// another multiplicative one, each adding a key) break the lattice structure of a single
// multiplicative congruence.
func dropoutUniform(c *Node, seed uint64, salt int64, shape shapes.Shape) *Node {
	g := c.Graph()
	const P = dropoutPrime
	mod := func(x *Node) *Node { return Rem(x, Scalar(g, dtypes.Int64, P)) }
	// The keys: residues < P, so that each product below stays under 2⁶².
	k1 := mod(AddScalar(MulScalar(mod(c), 69621), float64((int64(seed%P)+salt*40692)%P)))
	k2 := mod(AddScalar(MulScalar(k1, 48271), float64(salt+1)))
	idx := Iota(g, shapes.Make(dtypes.Int64, shape.Size()), 0)
	h := mod(Add(MulScalar(mod(Add(idx, k1)), 48271), k2))
	h = mod(Add(Mul(h, h), k1))
	h = mod(AddScalar(MulScalar(h, 16807), 12345))
	u := DivScalar(ConvertDType(h, dtypes.Float64), P)
	return Reshape(ConvertDType(u, dtypes.Float32), shape.Dimensions...)
}
