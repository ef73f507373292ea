package engine

import "stx.dev/stx/runtime"

// Generator completes token prompts: the in-process *runtime.Sampler, or a
// client of inference servers (engine/remote). Row i of the answer completes
// prompts[i]; the same seed, prompts and options give the same samples where
// the generator is deterministic (the in-process sampler, an stx server).
type Generator interface {
	Generate(prompts [][]int32, opts runtime.SampleOptions) ([]runtime.Sample, error)
}

var _ Generator = (*runtime.Sampler)(nil)
