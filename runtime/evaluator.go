package runtime

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Evaluator runs an OutputOf on host batches, with graphs compiled per batch shape.
type Evaluator struct{ *NamedExec }

// NewEvaluator prepares forward-only evaluation of fn with m (any kind of model) on backend.
func NewEvaluator[M Weights](backend backends.Backend, m M, fn OutputOf[M]) (*Evaluator, error) {
	x, err := NewNamedExec(backend, m.Context(), "evaluator", func(ctx *context.Context, batch map[string]*Node) map[string]*Node {
		return fn(ctx, m, batch)
	})
	if err != nil {
		return nil, err
	}
	return &Evaluator{x}, nil
}

// NamedExec is a compiled graph with named inputs and outputs: host tensors keyed by name
// go in (fed in sorted-key order), host tensors keyed by name come out. Every Run must use
// the keys of the first; graphs are compiled per input shape, and each must return the same
// output names. Any model kind (language model, velocity MLP) can run through it.
type NamedExec struct {
	label string
	mu    sync.Mutex
	keys  []string
	names []string
	exec  *context.Exec
	// devices > 1: Run splits the batch's rows among them (dataparallel.go).
	devices int
}

// NewNamedExec compiles fn over the variables of ctx on backend; label prefixes errors.
func NewNamedExec(backend backends.Backend, ctx *context.Context, label string,
	fn func(ctx *context.Context, batch map[string]*Node) map[string]*Node) (*NamedExec, error) {
	if err := moveToBackend(backend, ctx); err != nil { // no host copy left behind (upload.go)
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	e := &NamedExec{label: label}
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, in []*Node) []*Node {
		batch := make(map[string]*Node, len(e.keys))
		for i, k := range e.keys {
			batch[k] = in[i]
		}
		outs := fn(ctx, batch)
		names := slices.Sorted(maps.Keys(outs))
		if e.names == nil {
			e.names = names
		} else if !slices.Equal(names, e.names) {
			panic(fmt.Errorf("%s: outputs %v, earlier %v", label, names, e.names))
		}
		res := make([]*Node, len(names))
		for i, n := range names {
			res[i] = outs[n]
		}
		return res
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	e.exec = anyShapes(exec)
	return e, nil
}

// Run evaluates one batch; every call must use the same keys.
func (e *NamedExec) Run(batch map[string]*tensors.Tensor) (map[string]*tensors.Tensor, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := slices.Sorted(maps.Keys(batch))
	if e.keys == nil {
		e.keys = keys
	}
	if !slices.Equal(keys, e.keys) {
		return nil, fmt.Errorf("%s: batch keys %v, compiled for %v", e.label, keys, e.keys)
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = batch[k]
	}
	out, err := e.execute(args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.label, err)
	}
	res := make(map[string]*tensors.Tensor, len(out))
	for i, n := range e.names {
		res[n] = out[i]
	}
	return res, nil
}
