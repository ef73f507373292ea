package specializations

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

// Batch is a micro-batch inside the compiled graph: the host tensors of PrepareBatch become
// graph nodes under the same keys.
type Batch = map[string]*Node

// Output is what a specialization's model outputs inside the graph (log-probs, logits,
// values, velocities, ...), keyed by name.
type Output = map[string]*Node

// BatchOptions tells PrepareBatch how to cut a mini-batch (the rows of one optimizer step).
type BatchOptions struct {
	// MicroBatchSize is the number of rows (pairs for preference data) per micro-batch;
	// 0 puts every row in one micro-batch. The last micro-batch may be smaller.
	MicroBatchSize int
	// Pad is the token id used for padding (the model's PAD).
	Pad int32
	// Rollout is the 0-based rollout index, for knobs that follow a schedule (β of the mixed CE + K3 blend).
	Rollout int
	// Seed makes any host-side sampling of the batch (flow σ and noise) reproducible.
	Seed uint64
	// Temperature is the rollout sampler's temperature (0: greedy). Roles that score the
	// sampler's tokens (actor, opd, mixed_loss_dagger_opd, and their reference or teacher
	// roles) compute log-probs of logits/Temperature, as the sampler did.
	Temperature float64
	// Pack lays sequences end to end in packed rows with per-sequence attention and positions
	// (runtime.Pack), and makes a micro-batch MicroBatchSize such rows of PackTokens tokens (a
	// token budget) rather than MicroBatchSize sequences (see lmBase.microBatchRows; 0 keeps an
	// unpacked micro-batch's slots, rows of the padded length or 2 or 4 times it); outputs and
	// losses are those of the unpacked rows.
	Pack       bool
	PackTokens int
}

// Specialization is a role's algorithm: how rollout data becomes micro-batches and which
// loss the role minimises (PrepareBatch, ExtractModelOutput and ComputeLoss).
// ExtractModelOutput depends on the kind of model, so it lives in LM and
// Flow below.
type Specialization interface {
	// Contract is the static description registered under the specialization's name.
	Contract() Contract
	// PrepareBatch turns one optimizer step's rows into micro-batches (host tensors). It
	// reads exactly the keys of Contract().Requires and fails naming the first one absent.
	// For a frozen role it prepares the forward inputs only.
	PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error)
	// Reducer is the loss aggregation (loss_agg_mode) of a micro-batch: the recipe's
	// loss_agg_mode with the mini-batch denominators that PrepareBatch put in the batch.
	Reducer(batch Batch) loss.Reducer
	// ComputeLoss builds the scalar loss and named scalar metrics from the model's output.
	ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error)
}

// ModelSpecialization is a specialization of a role whose model is of kind M: the
// language models (LM) and the flow roles' velocity model (Flow) train through the same
// runtime.Trainer.
type ModelSpecialization[M runtime.Weights] interface {
	Specialization
	// ExtractModelOutput runs the model inside the graph and returns what the loss needs.
	ExtractModelOutput(ctx *context.Context, m M, batch Batch) (Output, error)
	// Loss composes ExtractModelOutput, Reducer and ComputeLoss for runtime.Trainer.
	Loss() runtime.LossOf[M]
	// Produce is the forward-only output of Contract().Produces, for runtime.Evaluator:
	// per target position ([rows, tokens] for per-token keys, [rows] for per-row keys) for a
	// language model, one value or vector per row for a velocity model.
	Produce() runtime.OutputOf[M]
}

// LM is a specialization of a language-model role (runtime.Model).
type LM = ModelSpecialization[*runtime.Model]

// Flow is a specialization of a velocity-model role (runtime.VelocityModel).
type Flow = ModelSpecialization[*runtime.VelocityModel]

// AdvantageComputer is implemented by specializations that compute advantages through the
// estimators registry: exactly those whose Contract.Estimator is set (New checks it). ComputeAdvantages sets
// data.Tok[rollout.KeyAdvantages] (and returns, for GAE) over the whole rollout; run it
// before cutting mini-batches so that group statistics see every row. It returns the
// estimator's warnings.
type AdvantageComputer interface {
	ComputeAdvantages(data *rollout.Rollout) ([]string, error)
}

// New builds the specialization named by cfg.Role.Specialization for a role.
func New(cfg RoleConfig) (Specialization, error) {
	c, err := Get(cfg.Role.Specialization)
	if err != nil {
		return nil, fmt.Errorf("role %q: %w", cfg.Role.Name, err)
	}
	if c.New == nil {
		return nil, fmt.Errorf("role %q: specialization %q has a contract but no implementation", cfg.Role.Name, c.Name)
	}
	s, err := c.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("role %q, specialization %q: %w", cfg.Role.Name, c.Name, err)
	}
	// The flag is what vet reads before anything is built, the interface what the engine
	// calls: they must agree.
	if _, ok := s.(AdvantageComputer); ok != c.Estimator {
		return nil, fmt.Errorf("role %q: specialization %q: Contract.Estimator is %v but its implementation is%s an AdvantageComputer",
			cfg.Role.Name, c.Name, c.Estimator, map[bool]string{true: "", false: " not"}[ok])
	}
	if b, ok := s.(binder); ok {
		b.bind(s)
	}
	return s, nil
}

// lossParts are the three steps of a specialization that its loss composes.
type lossParts[M runtime.Weights] interface {
	Contract() Contract
	ExtractModelOutput(ctx *context.Context, m M, batch Batch) (Output, error)
	Reducer(batch Batch) loss.Reducer
	ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error)
}

// selfLoss gives every specialization its Loss once, in the base it embeds (lmBase,
// flowBase): the base's methods cannot reach the embedding type's ExtractModelOutput and
// ComputeLoss, so New binds the built specialization to it.
type selfLoss[M runtime.Weights] struct{ self lossParts[M] }

// bind records the specialization whose steps Loss composes.
func (b *selfLoss[M]) bind(s Specialization) {
	if p, ok := s.(lossParts[M]); ok {
		b.self = p
	}
}

// Loss is the runtime.LossOf of the specialization that New built.
func (b selfLoss[M]) Loss() runtime.LossOf[M] {
	if b.self == nil {
		panic("specializations: Loss of a specialization not built by New")
	}
	return lossFn(b.self)
}

// binder is a specialization with a selfLoss to bind (every one of this package).
type binder interface{ bind(Specialization) }

// lossFn adapts a specialization's three steps to runtime.LossOf. GoMLX reports
// graph-building errors by panicking, and runtime.LossOf has no error result, so errors
// become panics that the executor turns back into errors.
func lossFn[M runtime.Weights](s lossParts[M]) runtime.LossOf[M] {
	return func(ctx *context.Context, m M, batch map[string]*Node) (*Node, map[string]*Node) {
		out, err := s.ExtractModelOutput(ctx, m, batch)
		if err != nil {
			panic(fmt.Errorf("%s: model output: %w", s.Contract().Name, err))
		}
		l, metrics, err := s.ComputeLoss(out, batch, s.Reducer(batch))
		if err != nil {
			panic(fmt.Errorf("%s: loss: %w", s.Contract().Name, err))
		}
		return l, metrics
	}
}
