// Package velocity is the small velocity model of stx's flow-matching specializations
// (Liu et al., 2022): an MLP v_θ(x, σ) over continuous vectors, with its own plain
// Adam trainer. The language-model runtime has no such model, and flow matching needs
// nothing more than this to be trained and tested end to end.
//
// The model is v = W_out·silu(W_h·silu(W_x·x + W_σ·φ(σ) + b_0) + b_h) + b_out with the
// time features φ(σ) = (σ, sin πσ, cos πσ). The input projections of x and φ(σ) are two
// matmuls rather than one over a concatenation, because Concatenate's gradient needs Slice
// (and so Pad), which SimpleGo lacks.
package velocity

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
)

// Config sizes the MLP.
type Config struct {
	Dim    int // dimension of the data vectors x
	Hidden int // width of the two hidden layers
}

// Model is a velocity MLP whose variables live in its own context.
type Model struct {
	Config Config
	ctx    *context.Context
	vars   []*context.Variable
}

// scope is where the model's variables live in its context.
const scope = "/velocity"

// NewModel initialises a model from seed (He-style normal weights, zero biases).
func NewModel(cfg Config, seed uint64) (*Model, error) {
	if cfg.Dim <= 0 || cfg.Hidden <= 0 {
		return nil, fmt.Errorf("velocity model: dim %d and hidden %d must be > 0", cfg.Dim, cfg.Hidden)
	}
	m := &Model{Config: cfg, ctx: context.New()}
	rng := rand.New(rand.NewPCG(seed, 0x564c4f43)) // "VLOC"
	mat := func(rows, cols int) *tensors.Tensor {
		d := make([]float32, rows*cols)
		std := math.Sqrt(1 / float64(rows))
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
		}
		return tensors.FromFlatDataAndDimensions(d, rows, cols)
	}
	zeros := func(n int) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(make([]float32, n), n) }
	c := m.ctx.InAbsPath(scope).Checked(false)
	for _, p := range []struct {
		name string
		val  *tensors.Tensor
	}{
		{"w_x", mat(cfg.Dim, cfg.Hidden)}, {"w_sigma", mat(3, cfg.Hidden)}, {"b_0", zeros(cfg.Hidden)},
		{"w_h", mat(cfg.Hidden, cfg.Hidden)}, {"b_h", zeros(cfg.Hidden)},
		{"w_out", mat(cfg.Hidden, cfg.Dim)}, {"b_out", zeros(cfg.Dim)},
	} {
		m.vars = append(m.vars, c.VariableWithValue(p.name, p.val))
	}
	return m, nil
}

// Context returns the context holding the model's variables.
func (m *Model) Context() *context.Context { return m.ctx }

// Variables returns the model's variables (all trainable).
func (m *Model) Variables() []*context.Variable { return m.vars }

func (m *Model) weight(ctx *context.Context, g *Graph, name string) *Node {
	v := ctx.GetVariableByScopeAndName(scope, name)
	if v == nil {
		panic(fmt.Sprintf("velocity model: variable %q not found", name))
	}
	return v.ValueGraph(g)
}

func silu(x *Node) *Node { return Mul(x, Sigmoid(x)) }

// Forward returns v_θ(x, σ): x [N, Dim] (float32), sigma [N] → [N, Dim].
func (m *Model) Forward(ctx *context.Context, x, sigma *Node) *Node {
	g := x.Graph()
	n := x.Shape().Dimensions[0]
	s := Reshape(ConvertDType(sigma, x.DType()), n, 1)
	pi := Scalar(g, x.DType(), math.Pi)
	// The three time features, each [N, 1], each projected by one row of w_sigma; the rows
	// are picked with one-hot matmuls (no Slice on a differentiated path).
	wS := m.weight(ctx, g, "w_sigma")
	feat := Add(Add(Mul(s, rowOf(wS, 0)), Mul(Sin(Mul(s, pi)), rowOf(wS, 1))), Mul(Cos(Mul(s, pi)), rowOf(wS, 2)))
	bias := func(name string) *Node { return InsertAxes(m.weight(ctx, g, name), 0) } // [1, H] broadcasts over N
	h := silu(Add(Add(Dot(x, m.weight(ctx, g, "w_x")), feat), bias("b_0")))
	h = silu(Add(Dot(h, m.weight(ctx, g, "w_h")), bias("b_h")))
	return Add(Dot(h, m.weight(ctx, g, "w_out")), bias("b_out"))
}

// rowOf returns row i of w [3, H] as [1, H] through a one-hot product.
func rowOf(w *Node, i int) *Node {
	oh := make([]float32, w.Shape().Dimensions[0])
	oh[i] = 1
	return Dot(Const(w.Graph(), tensors.FromFlatDataAndDimensions(oh, 1, len(oh))), w)
}

// LossFn builds a scalar loss and named scalar metrics from the model and a micro-batch.
type LossFn func(ctx *context.Context, m *Model, batch map[string]*Node) (loss *Node, metrics map[string]*Node)

// OutputFn builds named forward-only outputs.
type OutputFn func(ctx *context.Context, m *Model, batch map[string]*Node) map[string]*Node

// Adam configures the trainer's optimizer (PyTorch Adam semantics, no weight decay).
type Adam struct {
	// LR is the learning rate of the first step (0 at the start of a warmup);
	// SetLR changes it between steps.
	LR, Beta1, Beta2, Eps float64
	// MaxGradNorm clips the global gradient norm (as torch's clip_grad_norm_); 0 turns clipping off.
	MaxGradNorm float64
}

// DefaultAdam is lr 1e-3, β = (0.9, 0.999), ε = 1e-8.
func DefaultAdam() Adam { return Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// StepResult reports one optimizer step.
type StepResult struct {
	Loss     float64            // sum of the micro-batch losses
	LR       float64            // the learning rate of the step
	GradNorm float64            // global gradient norm before clipping
	Skipped  bool               // the norm was not finite: the weights and moments were left as they were
	Metrics  map[string]float64 // summed over micro-batches (extremes: max/min); see runtime.CombineMetric
}

// Trainer takes Adam steps on a velocity model, summing the gradients of the micro-batches
// of a step (their losses are normalised by the mini-batch's counts, so they add up).
type Trainer struct {
	m       *Model
	loss    LossFn
	opt     Adam
	mu      sync.Mutex
	steps   int
	keys    []string
	metrics []string
	mom     []*context.Variable
	vel     []*context.Variable
	acc     []*context.Variable
	accExec *context.Exec
	apply   *context.Exec
}

// NewTrainer prepares training of m with loss on backend.
func NewTrainer(backend backends.Backend, m *Model, loss LossFn, opt Adam) (*Trainer, error) {
	if opt.LR < 0 || opt.Beta1 < 0 || opt.Beta1 >= 1 || opt.Beta2 < 0 || opt.Beta2 >= 1 || opt.Eps <= 0 || opt.MaxGradNorm < 0 {
		return nil, fmt.Errorf("velocity trainer: invalid Adam config %+v", opt)
	}
	t := &Trainer{m: m, loss: loss, opt: opt}
	for i, v := range m.vars {
		zero := func(kind string) *context.Variable {
			st := m.ctx.InAbsPath(fmt.Sprintf("/velocity_opt/%s", kind)).Checked(false).
				VariableWithValue(fmt.Sprintf("v%d", i), tensors.FromShape(v.Shape()))
			st.SetTrainable(false)
			return st
		}
		t.mom, t.vel, t.acc = append(t.mom, zero("m")), append(t.vel, zero("v")), append(t.acc, zero("acc"))
	}
	var err error
	if t.accExec, err = context.NewExec(backend, m.ctx, t.accumulateGraph); err != nil {
		return nil, fmt.Errorf("velocity trainer: %w", err)
	}
	if t.apply, err = context.NewExec(backend, m.ctx, t.applyGraph); err != nil {
		return nil, fmt.Errorf("velocity trainer: %w", err)
	}
	return t, nil
}

func (t *Trainer) lossAndGrads(ctx *context.Context, in []*Node) (*Node, []*Node, []*Node) {
	batch := make(map[string]*Node, len(t.keys))
	for i, k := range t.keys {
		batch[k] = in[i]
	}
	loss, mets := t.loss(ctx, t.m, batch)
	names := slices.Sorted(maps.Keys(mets))
	if t.metrics == nil {
		t.metrics = names
	}
	var out []*Node
	for _, n := range t.metrics {
		out = append(out, ConvertDType(mets[n], dtypes.Float64))
	}
	g := loss.Graph()
	params := make([]*Node, len(t.m.vars))
	for i, v := range t.m.vars {
		params[i] = v.ValueGraph(g)
	}
	return loss, out, Gradient(loss, params...)
}

func (t *Trainer) accumulateGraph(ctx *context.Context, in []*Node) []*Node {
	loss, mets, grads := t.lossAndGrads(ctx, in)
	g := loss.Graph()
	for i, a := range t.acc {
		a.SetValueGraph(Add(a.ValueGraph(g), grads[i]))
	}
	return append([]*Node{ConvertDType(loss, dtypes.Float64)}, mets...)
}

// applyGraph inputs: lr·√(1−β2^t)/(1−β1^t) (the folded bias correction, so that a
// new learning rate needs no recompilation), then the batch. Outputs: the loss, the
// global gradient norm before clipping, the metrics.
func (t *Trainer) applyGraph(ctx *context.Context, in []*Node) []*Node {
	stepSize := in[0]
	loss, mets, grads := t.lossAndGrads(ctx, in[1:])
	g := loss.Graph()
	for i := range grads {
		grads[i] = Add(t.acc[i].ValueGraph(g), grads[i])
		t.acc[i].SetValueGraph(ZerosLike(grads[i]))
	}
	// Global-norm clipping: G = √Σg², g ← g·min(1, max/(G+1e-6)); a non-finite G
	// skips the update (the accumulators are zeroed either way).
	var sq *Node
	for _, gr := range grads {
		s := ReduceAllSum(Square(gr))
		if sq == nil {
			sq = s
		} else {
			sq = Add(sq, s)
		}
	}
	norm := Sqrt(sq)
	coef := OnesLike(norm)
	if t.opt.MaxGradNorm > 0 {
		coef = Min(coef, Div(Scalar(g, norm.DType(), t.opt.MaxGradNorm), AddScalar(norm, 1e-6)))
	}
	finite := IsFinite(norm)
	for i, v := range t.m.vars {
		grad := Mul(grads[i], coef)
		oldM, oldV, p := t.mom[i].ValueGraph(g), t.vel[i].ValueGraph(g), v.ValueGraph(g)
		m := Add(MulScalar(oldM, t.opt.Beta1), MulScalar(grad, 1-t.opt.Beta1))
		vv := Add(MulScalar(oldV, t.opt.Beta2), MulScalar(Square(grad), 1-t.opt.Beta2))
		upd := Div(Mul(m, ConvertDType(stepSize, m.DType())), AddScalar(Sqrt(vv), t.opt.Eps))
		t.mom[i].SetValueGraph(Where(finite, m, oldM))
		t.vel[i].SetValueGraph(Where(finite, vv, oldV))
		v.SetValueGraph(Where(finite, Sub(p, upd), p))
	}
	out := []*Node{ConvertDType(loss, dtypes.Float64), ConvertDType(norm, dtypes.Float64)}
	return append(out, mets...)
}

// SetLR sets the learning rate of the next steps (a schedule's value; no recompilation).
func (t *Trainer) SetLR(lr float64) error {
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("velocity trainer: learning rate %g", lr)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opt.LR = lr
	return nil
}

// Steps is the number of Adam updates taken (skipped steps excluded: their
// bias correction must not advance, as in PyTorch).
func (t *Trainer) Steps() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.steps
}

// Step takes one optimizer step over the micro-batches (every one with the same keys).
func (t *Trainer) Step(microBatches []map[string]*tensors.Tensor) (StepResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	args, err := runtime.MicroBatchArgs(&t.keys, microBatches)
	if err != nil {
		return StepResult{}, fmt.Errorf("velocity train step: %w", err)
	}
	res := StepResult{LR: t.opt.LR, Metrics: map[string]float64{}}
	seen := false
	collect := func(out []*tensors.Tensor) {
		res.Loss += tensors.ToScalar[float64](out[0])
		for i, n := range t.metrics {
			res.Metrics[n] = runtime.CombineMetric(n, res.Metrics[n], tensors.ToScalar[float64](out[i+1]), !seen)
		}
		seen = true
	}
	last := len(microBatches) - 1
	for i := range last {
		out, err := t.accExec.Exec(args[i]...)
		if err != nil {
			return StepResult{}, fmt.Errorf("velocity train step, micro-batch %d: %w", i, err)
		}
		collect(out)
	}
	k := float64(t.steps + 1)
	stepSize := t.opt.LR * math.Sqrt(1-math.Pow(t.opt.Beta2, k)) / (1 - math.Pow(t.opt.Beta1, k))
	out, err := t.apply.Exec(append([]any{float32(stepSize)}, args[last]...)...)
	if err != nil {
		return StepResult{}, fmt.Errorf("velocity train step, micro-batch %d: %w", last, err)
	}
	res.GradNorm = tensors.ToScalar[float64](out[1])
	out = append(out[:1], out[2:]...)
	collect(out)
	res.Skipped = math.IsNaN(res.GradNorm) || math.IsInf(res.GradNorm, 0)
	if !res.Skipped {
		t.steps++
	}
	return res, nil
}

// Evaluator runs an OutputFn forward-only on host batches.
type Evaluator struct{ *runtime.NamedExec }

// NewEvaluator prepares forward-only evaluation of fn with m on backend.
func NewEvaluator(backend backends.Backend, m *Model, fn OutputFn) (*Evaluator, error) {
	x, err := runtime.NewNamedExec(backend, m.ctx, "velocity evaluator", func(ctx *context.Context, batch map[string]*Node) map[string]*Node {
		return fn(ctx, m, batch)
	})
	if err != nil {
		return nil, err
	}
	return &Evaluator{x}, nil
}
