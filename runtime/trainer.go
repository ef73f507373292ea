package runtime

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TrainerConfig configures the optimizer step.
type TrainerConfig struct {
	AdamW       AdamW
	Schedule    Schedule
	MaxGradNorm float64 // global-norm clipping threshold; 0 turns clipping off
}

// StepResult reports one optimizer step.
type StepResult struct {
	Step     int                // 0-based index of the step just taken (or skipped)
	LR       float64            // learning rate used
	Loss     float64            // sum of the micro-batch losses
	Metrics  map[string]float64 // each metric summed over micro-batches (extremes: max/min); see CombineMetric
	GradNorm float64            // global gradient norm before clipping
	Skipped  bool               // the gradient norm was not finite: no update was applied
}

// Trainer runs optimizer steps on a model of any kind (see Weights): gradients of a loss built
// in the graph, accumulated over micro-batches, clipped by global norm, applied with AdamW.
// Graphs are compiled per micro-batch shape; the learning rate is a graph input, so changing it
// never recompiles.
type Trainer struct {
	m         Weights
	loss      func(ctx *context.Context, batch map[string]*Node) (*Node, map[string]*Node)
	mu        sync.Mutex
	cfg       TrainerConfig
	step      int // schedule index: optimizer steps taken so far, skipped ones included
	adamSteps int // AdamW's t: steps actually applied
	keys      []string
	metrics   []string
	trainVar  []*context.Variable
	trainName []string // the tensor name of each trainable variable
	decay     []bool
	mVar      []*context.Variable
	vVar      []*context.Variable
	accVar    []*context.Variable
	// accumulate adds a micro-batch's gradients into the accumulators; applyFresh and
	// applyAccumulated finish a step from the last micro-batch, without and with accumulators.
	accumulate, applyFresh, applyAccumulated *context.Exec
	dp                                       *dataParallel // nil on one device; see dataparallel.go
}

// optimizerScope is where the trainer keeps its state variables, under the model's scope.
const optimizerScope = "/stx_optimizer"

// NewTrainer prepares training of m's trainable variables with loss on backend.
func NewTrainer[M Weights](backend backends.Backend, m M, loss LossOf[M], cfg TrainerConfig) (*Trainer, error) {
	if err := cfg.AdamW.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Schedule.Validate(); err != nil {
		return nil, err
	}
	view := trainingView(m) // adapter dropout drops in training graphs only (lora_dropout.go)
	t := &Trainer{m: m, cfg: cfg, loss: func(ctx *context.Context, batch map[string]*Node) (*Node, map[string]*Node) {
		return loss(ctx, view, batch)
	}}
	// A LoRA model lists its adapters after the base tensors, which it has frozen: only the
	// adapters get gradients and optimizer state.
	for _, p := range trainableParams(m) {
		v := m.Variable(p.Name)
		if !v.Trainable {
			continue
		}
		t.trainVar = append(t.trainVar, v)
		t.trainName = append(t.trainName, p.Name)
		t.decay = append(t.decay, !(cfg.AdamW.NoDecayNormsAndBiases && len(p.Shape) == 1))
		t.mVar = append(t.mVar, t.zeros("m", v))
		t.vVar = append(t.vVar, t.zeros("v", v))
	}
	if len(t.trainVar) == 0 {
		return nil, fmt.Errorf("trainer: the model has no trainable variables")
	}
	if err := moveToBackend(backend, m.Context()); err != nil { // no host copy left behind (upload.go)
		return nil, fmt.Errorf("trainer: %w", err)
	}
	var err error
	if t.accumulate, err = context.NewExec(backend, m.Context(), t.accumulateGraph); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	anyShapes(t.accumulate)
	if t.applyFresh, err = context.NewExec(backend, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		return t.applyGraph(ctx, in, false)
	}); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if t.applyAccumulated, err = context.NewExec(backend, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		return t.applyGraph(ctx, in, true)
	}); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return t, nil
}

// zeros is a new optimizer-state variable of kind for v, zero-valued.
func (t *Trainer) zeros(kind string, v *context.Variable) *context.Variable {
	ctx := t.m.Context().InAbsPath(optimizerScope + "/" + kind + v.Scope()).Checked(false)
	st := ctx.VariableWithValue(v.Name(), tensors.FromShape(v.Shape()))
	st.SetTrainable(false)
	return st
}

// ensureAccumulators creates the gradient accumulators on the first step with more than one
// micro-batch: a step of one micro-batch needs none, and at a real model's scale they are a
// full f32 copy of the weights (2 GB at 0.5B parameters).
func (t *Trainer) ensureAccumulators() {
	if t.accVar != nil {
		return
	}
	for i := range t.trainVar {
		t.accVar = append(t.accVar, t.newAccumulator(i)) // sharded under FSDP (fsdp.go)
	}
}

// Model returns the trained model.
func (t *Trainer) Model() Weights { return t.m }

// StepCount returns the number of optimizer steps taken (skipped steps included).
func (t *Trainer) StepCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.step
}

// SetSchedule replaces the learning-rate schedule (hot reload); it applies from the next step
// and never recompiles.
func (t *Trainer) SetSchedule(s Schedule) error {
	if err := s.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	t.cfg.Schedule = s
	t.mu.Unlock()
	return nil
}

// lossAndGrads builds the loss and the gradients of the trainable variables.
func (t *Trainer) lossAndGrads(ctx *context.Context, batchNodes []*Node) (loss *Node, metrics []*Node, grads []*Node) {
	batch := make(map[string]*Node, len(t.keys))
	for i, k := range t.keys {
		batch[k] = batchNodes[i]
	}
	// FSDP: the full weights, gathered from the devices' shards, which the model reads (fsdp.go).
	gathered, release := t.gather(batchNodes[0].Graph())
	defer release()
	loss, mets := t.loss(ctx, batch)
	if loss.Rank() != 0 {
		panic(fmt.Errorf("trainer: the loss must be a scalar, got shape %s", loss.Shape()))
	}
	names := slices.Sorted(maps.Keys(mets))
	if t.metrics == nil {
		t.metrics = names
	} else if !slices.Equal(t.metrics, names) {
		panic(fmt.Errorf("trainer: the loss builder returned metrics %v, earlier %v", names, t.metrics))
	}
	for _, n := range names {
		if mets[n].Rank() != 0 {
			panic(fmt.Errorf("trainer: metric %q must be a scalar, got shape %s", n, mets[n].Shape()))
		}
		metrics = append(metrics, ConvertDType(mets[n], dtypes.Float64))
	}
	g := loss.Graph()
	params := make([]*Node, len(t.trainVar))
	for i, v := range t.trainVar {
		if gathered != nil {
			params[i] = gathered[i]
		} else {
			params[i] = v.ValueGraph(g)
		}
	}
	// One device: the gradients; several: also weighted and all-reduced (dataparallel.go).
	return t.dp.reduce(t.metrics, loss, metrics, params, batchNodes[len(t.keys):])
}

func (t *Trainer) accumulateGraph(ctx *context.Context, batchNodes []*Node) []*Node {
	loss, metrics, grads := t.lossAndGrads(ctx, batchNodes)
	g := loss.Graph()
	for i, acc := range t.accVar {
		acc.SetValueGraph(Add(acc.ValueGraph(g), grads[i]))
	}
	return append([]*Node{ConvertDType(loss, dtypes.Float64)}, metrics...)
}

// applyGraph inputs: lr, 1−β1^t, 1−β2^t, then the batch. Outputs: loss, grad norm, metrics.
func (t *Trainer) applyGraph(ctx *context.Context, in []*Node, withAccumulators bool) []*Node {
	lr, bc1, bc2 := in[0], in[1], in[2]
	loss, metrics, grads := t.lossAndGrads(ctx, in[3:])
	g := loss.Graph()
	if withAccumulators {
		for i, acc := range t.accVar {
			grads[i] = Add(acc.ValueGraph(g), grads[i])
			acc.SetValueGraph(ZerosLike(grads[i]))
		}
	}
	norm := t.dp.globalNorm(grads) // FSDP: from the devices' gradient shards
	coef := clipCoefficient(norm, t.cfg.MaxGradNorm)
	finite := IsFinite(norm)
	for i := range t.trainVar {
		v := t.weightVar(i) // FSDP: the device's shard
		p := v.ValueGraph(g)
		grad := Mul(grads[i], coef)
		mv, vv := t.mVar[i], t.vVar[i]
		oldM, oldV := mv.ValueGraph(g), vv.ValueGraph(g)
		newP, newM, newV := t.cfg.AdamW.update(p, grad, oldM, oldV, lr, bc1, bc2, t.decay[i])
		// A non-finite gradient norm skips the update: one bad batch must not poison the weights.
		v.SetValueGraph(Where(finite, newP, p))
		mv.SetValueGraph(Where(finite, newM, oldM))
		vv.SetValueGraph(Where(finite, newV, oldV))
	}
	out := []*Node{ConvertDType(loss, dtypes.Float64), ConvertDType(norm, dtypes.Float64)}
	return append(out, metrics...)
}

// Step takes one optimizer step over the given micro-batches (host tensors keyed by name; every
// micro-batch must have the same keys, and shapes should come from a small set of buckets).
func (t *Trainer) Step(microBatches []map[string]*tensors.Tensor) (StepResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	args, err := MicroBatchArgs(&t.keys, microBatches)
	if err == nil {
		args, err = t.deviceParts(args) // one device: unchanged (dataparallel.go)
	}
	if err == nil {
		err = t.loadShards() // FSDP: re-shard weights set from outside (fsdp.go)
	}
	if err != nil {
		return StepResult{}, fmt.Errorf("train step: %w", err)
	}
	if err := beforeTrainStep(t.m, t.step); err != nil { // the dropout masks' counter
		return StepResult{}, fmt.Errorf("train step: %w", err)
	}
	res := StepResult{Step: t.step, LR: t.cfg.Schedule.LR(t.step), Metrics: map[string]float64{}}
	bc1, bc2 := t.cfg.AdamW.biasCorrections(t.adamSteps + 1)
	seen := false
	addMetrics := func(vals []*tensors.Tensor) {
		for i, n := range t.metrics {
			res.Metrics[n] = CombineMetric(n, res.Metrics[n], tensors.ToScalar[float64](vals[i]), !seen)
		}
		seen = true
	}
	last := len(args) - 1
	if last > 0 {
		t.ensureAccumulators()
	}
	for i := range last {
		out, err := t.accumulate.Exec(args[i]...)
		if err != nil {
			t.resetAccumulators()
			return StepResult{}, fmt.Errorf("train step, micro-batch %d: %w", i, err)
		}
		res.Loss += tensors.ToScalar[float64](out[0])
		addMetrics(out[1:])
	}
	exec := t.applyFresh
	if last > 0 {
		exec = t.applyAccumulated
	}
	in := []any{float32(res.LR), float32(bc1), float32(bc2)}
	out, err := exec.Exec(t.withPrefix(in, args[last])...)
	if err != nil {
		t.resetAccumulators()
		return StepResult{}, fmt.Errorf("train step, micro-batch %d: %w", last, err)
	}
	res.Loss += tensors.ToScalar[float64](out[0])
	res.GradNorm = tensors.ToScalar[float64](out[1])
	addMetrics(out[2:])
	res.Skipped = math.IsNaN(res.GradNorm) || math.IsInf(res.GradNorm, 0)
	if err := t.storeShards(); err != nil { // FSDP: the model's variables get the new weights
		return StepResult{}, fmt.Errorf("train step: %w", err)
	}
	// PyTorch's step count advances only when the optimizer steps; the schedule index advances
	// either way, so a skipped step still consumes its place in the schedule.
	t.step++
	if !res.Skipped {
		t.adamSteps++
	}
	return res, nil
}

// resetAccumulators zeroes the gradient accumulators after a failed step.
func (t *Trainer) resetAccumulators() {
	for _, acc := range t.accVar {
		_ = acc.SetValue(tensors.FromShape(acc.Shape()))
	}
}

// paramName is the Hugging Face name of the i-th trainable variable.
func (t *Trainer) paramName(i int) string { return t.trainName[i] }
