package specializations

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// defaultKnobs are the schema's defaults of every knob: those of a recipe that
// sets none, as `stx vet` resolves it (so a knob added to the schema, or a
// default changed there, reaches these tests without a copy kept here).
func defaultKnobs() schema.Knobs {
	k, err := schemaDefaults()
	if err != nil {
		panic(fmt.Sprintf("the schema's knob defaults: %v", err))
	}
	k.EstimatorMap = maps.Clone(k.EstimatorMap)
	return k
}

// schemaDefaults resolves a recipe of one role that sets no knob, once.
var schemaDefaults = sync.OnceValues(func() (schema.Knobs, error) {
	src := "package x\nrecipes: defaults: roles: [{name: \"p\", specialization: \"sft\"}]\n"
	dir, err := os.MkdirTemp("", "stx-defaults-")
	if err != nil {
		return schema.Knobs{}, err
	}
	defer os.RemoveAll(dir)
	cat, err := schema.Load([]string{"r.cue"}, schema.Options{Dir: dir, Sources: map[string][]byte{"r.cue": []byte(src)}})
	if err != nil {
		return schema.Knobs{}, err
	}
	return cat.Recipes["defaults"].Knobs, nil
})

var (
	backendOnce sync.Once
	backend     *runtime.Backend
	backendErr  error
)

func testBackend(t testing.TB) *runtime.Backend {
	t.Helper()
	backendOnce.Do(func() { backend, backendErr = runtime.NewBackend("") })
	if backendErr != nil {
		t.Fatal(backendErr)
	}
	return backend
}

// onXLA reports whether the tests run on the xla backend ($GOMLX_BACKEND, CI's `make test-xla`
// pass on XLA's CPU PJRT plugin). There every trainer and evaluator is compiled by XLA (2–5 s
// each for the tiny model on 2 cores), so the tests that build one per case run one case per
// specialization (and per distinct path); the cpu backend runs them all, and the graphs are
// the same on both backends.
func onXLA() bool { return runtime.EnvBackendKind() == "xla" }

func tinyModel(t testing.TB, valueHead bool) *runtime.Model {
	t.Helper()
	cfg, _ := runtime.BuiltinConfig("tiny")
	m, err := runtime.NewModel(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	if valueHead {
		if err := m.AddValueHead(8); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// lmRollout builds rows of random byte tokens: a prompt of 3–4 tokens and a completion of
// 4–8 tokens (mask 1), rewards in {0, 1}, groups of two, sampler log-probs around −5.
func lmRollout(rows int, seed uint64) *rollout.Rollout {
	rng := rand.New(rand.NewPCG(seed, 1))
	r := &rollout.Rollout{Tok: map[string][][]float32{}, Row: map[string][]float64{}}
	for i := range rows {
		p, c := 3+rng.IntN(2), 4+rng.IntN(5)
		tok := make([]int32, p+c)
		mask := make([]float32, p+c)
		lp := make([]float32, p+c)
		for j := range tok {
			tok[j] = int32(97 + rng.IntN(8))
			if j >= p {
				mask[j] = 1
				lp[j] = float32(-5.5 + 0.2*rng.Float64())
			}
		}
		r.Tokens = append(r.Tokens, tok)
		r.Mask = append(r.Mask, mask)
		r.PromptLen = append(r.PromptLen, p)
		r.Reward = append(r.Reward, float64(rng.IntN(2)))
		r.GroupID = append(r.GroupID, string(rune('a'+i/2)))
		r.Tok[rollout.KeySamplerLogProbs] = append(r.Tok[rollout.KeySamplerLogProbs], lp)
	}
	// Rewards differ inside each group, so GRPO advantages are not all zero.
	for i := 0; i+1 < rows; i += 2 {
		r.Reward[i], r.Reward[i+1] = 1, 0
	}
	return r
}

// trainSteps runs steps optimizer steps of spec on model m with a fixed batch, returning
// the first and last losses (the loss of the last step is re-evaluated after it).
func trainSteps[M runtime.Weights](t *testing.T, spec ModelSpecialization[M], m M, mbs []map[string]*tensors.Tensor, steps int, lr float64) []float64 {
	t.Helper()
	tr, err := runtime.NewTrainer(testBackend(t), m, spec.Loss(), runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(),
		Schedule: runtime.Schedule{Kind: "constant", BaseLR: lr}})
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for range steps {
		res, err := tr.Step(mbs)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, res.Loss)
	}
	return losses
}
