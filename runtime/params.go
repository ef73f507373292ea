package runtime

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/safetensors"
)

// Weights is the parameter interface that the Trainer, the Evaluator and the checkpoint
// format work on, whatever the kind of model: named float32 tensors held as variables of a
// context, saved as a Hugging Face-style directory (config.json and model.safetensors).
// Model (the language models) and VelocityModel (the flow roles' MLP) implement it.
type Weights interface {
	// Context holds the variables; graphs of the model run over it.
	Context() *context.Context
	// Params lists the tensors in a fixed order, with their checkpoint names and shapes.
	Params() []Param
	// Variable is the variable of the named tensor (nil if there is none).
	Variable(name string) *context.Variable
	// ParamValues and SetParam read and write a tensor's values on the host.
	ParamValues(name string) ([]float32, error)
	SetParam(name string, data []float32) error
	// SaveDType is the dtype SaveHF writes the named tensor in.
	SaveDType(name string) safetensors.DType
	// SaveHF writes the model directory; LoadWeights reads one written for the same config.
	SaveHF(dir string, maxShardBytes int64) error
	LoadWeights(dir string) error
}

// LossOf builds a loss inside a compiled graph: from the model and the micro-batch's tensors
// (host-side keys become graph nodes with the same names) it returns a scalar loss and named
// scalar metrics. The trainer sums the gradients of the micro-batches of one optimizer step,
// so a loss normalised over the whole mini-batch (loss_agg_mode "token-mean") must be scaled by the
// builder (for example with a count passed in the batch).
type LossOf[M Weights] func(ctx *context.Context, m M, batch map[string]*graph.Node) (loss *graph.Node, metrics map[string]*graph.Node)

// LossFn is the loss builder of a language model.
type LossFn = LossOf[*Model]

// OutputOf builds named forward-only outputs from the model and a batch inside a compiled
// graph (a frozen reference's log-probs for a sync, a reward model's scores, values,
// velocities, ...).
type OutputOf[M Weights] func(ctx *context.Context, m M, batch map[string]*graph.Node) map[string]*graph.Node

// OutputFn is the forward-only output builder of a language model.
type OutputFn = OutputOf[*Model]

var (
	_ Weights = (*Model)(nil)
	_ Weights = (*VelocityModel)(nil)
)

// variableValues returns a copy of v's values (row-major, float32); v is owner's tensor name,
// nil when it has none.
func variableValues(v *context.Variable, owner, name string) ([]float32, error) {
	if v == nil {
		return nil, fmt.Errorf("%s has no tensor %q", owner, name)
	}
	t, err := v.Value()
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", name, err)
	}
	return tensorFloat32s(t) // a LoRA model's frozen base may be held in bfloat16 (lora_base.go)
}

// setParamValue sets owner's tensor name, listed in params, to data (row-major, float32): into
// its variable v, or through create where it has none yet.
func setParamValue(params []Param, v *context.Variable, owner, name string, data []float32, create func(*tensors.Tensor)) error {
	i := slices.IndexFunc(params, func(p Param) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("%s has no tensor %q", owner, name)
	}
	shape := params[i].Shape
	if len(data) != shapeSize(shape) {
		return fmt.Errorf("tensor %q: %d values for shape %v", name, len(data), shape)
	}
	t := tensors.FromFlatDataAndDimensions(data, shape...)
	if v != nil && v.Shape().DType == dtypes.BFloat16 {
		t = bf16Tensor(data, shape) // a frozen base held in bfloat16 stays so (lora_base.go)
	}
	if v == nil {
		create(t)
		return nil
	}
	if err := v.SetValue(t); err != nil {
		return fmt.Errorf("setting %q: %w", name, err)
	}
	return nil
}
