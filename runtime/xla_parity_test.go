package runtime

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/xlaplugin"
)

// backendIsXLA says whether b runs through XLA (a PJRT plugin), whose compiler fuses and
// reorders float operations: results agree with the CPU backends' to rounding, not bit for bit.
func backendIsXLA(b *Backend) bool {
	return b.Name() == "xla" || strings.HasPrefix(b.Spec, "xla")
}

// parityTolerance is how close the xla backend's results must be to the cpu backend's:
// 1e-5 absolute for values of magnitude up to 1, 1e-5 relative above (log-probs of a
// 259-token vocabulary are about −5.5; a float32 rounding there is 5e-7).
const parityTolerance = 1e-5

// parityDiff is |got − want| scaled as parityTolerance reads it: divided by max(1, |want|).
func parityDiff(got, want float32) float64 {
	return math.Abs(float64(got)-float64(want)) / math.Max(1, math.Abs(float64(want)))
}

// xlaCPUPlugins lists the XLA CPU PJRT plugins scripts/fetch-pjrt.sh installed, one per
// package version (xlaplugin.Fetched). It skips the test when there is none (or XLA is not
// compiled in), except under CI=true, where the plugins must have been fetched. The parity
// tests pick their backends themselves, so they run in the default pass only, not again in
// the passes that set $GOMLX_BACKEND (SimpleGo, XLA).
func xlaCPUPlugins(t *testing.T) []string {
	t.Helper()
	if !xlaCompiledIn {
		t.Skip("this binary was built without XLA support")
	}
	if os.Getenv("GOMLX_BACKEND") != "" {
		t.Skip("the parity tests run in the default pass (without $GOMLX_BACKEND)")
	}
	found := xlaplugin.Fetched()
	if len(found) == 0 {
		dir, _ := xlaplugin.Dir()
		if os.Getenv("CI") == "true" {
			t.Fatalf("no XLA CPU PJRT plugin in %q: run scripts/fetch-pjrt.sh", dir)
		}
		t.Skipf("no XLA CPU PJRT plugin in %q (scripts/fetch-pjrt.sh installs them)", dir)
	}
	return found
}

// forEachXLAPlugin runs f as a subtest per installed XLA CPU plugin (named by its package
// directory) with that plugin's xla backend and a cpu backend of its own. The subtests run in
// parallel: most of their time is XLA compiling graphs, on one core each.
func forEachXLAPlugin(t *testing.T, f func(t *testing.T, xla, cpu *Backend)) {
	for _, path := range xlaCPUPlugins(t) {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			t.Parallel()
			xla, err := NewBackend("xla:" + path)
			if err != nil {
				t.Fatal(err)
			}
			cpu, err := NewBackend("cpu")
			if err != nil {
				t.Fatal(err)
			}
			f(t, xla, cpu)
		})
	}
}

// parityModels are the models the parity tests compare on: the tiny Llama-style config
// (untied head, GQA 2:1), with a larger init so that attention and the MLP matter, and
// smallGQA (GQA, q/k/v biases, tied embeddings) with biases and norms given non-trivial values
// as TestGradientsMatchFiniteDifferences does. Each call returns a fresh model with the same
// weights: a model's variables hold tensors of one backend.
func parityModels() []struct {
	name string
	new  func(t *testing.T) *Model
} {
	tiny, _ := BuiltinConfig("tiny")
	tiny.InitStd = 0.1
	newModel := func(cfg Config, seed uint64, randomizeVectors bool) func(t *testing.T) *Model {
		return func(t *testing.T) *Model {
			t.Helper()
			m, err := NewModel(cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			if !randomizeVectors {
				return m
			}
			rng := rand.New(rand.NewPCG(seed, 2))
			for _, p := range m.Params() {
				if len(p.Shape) == 1 {
					v := make([]float32, p.Shape[0])
					for i := range v {
						v[i] = float32(1 + 0.3*rng.NormFloat64())
						if strings.HasSuffix(p.Name, ".bias") {
							v[i] -= 1
						}
					}
					if err := m.SetParam(p.Name, v); err != nil {
						t.Fatal(err)
					}
				}
			}
			return m
		}
	}
	return []struct {
		name string
		new  func(t *testing.T) *Model
	}{
		{"llama-tiny", newModel(tiny, 31, false)},
		{"gqa-bias-tied", newModel(smallGQA(), 32, true)},
	}
}

// scoreOn returns the per-token log-probs of seqs under m on b, flattened.
func scoreOn(t *testing.T, b *Backend, m *Model, seqs [][]int32) []float32 {
	t.Helper()
	sc, err := NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	scored, err := sc.Score(seqs)
	if err != nil {
		t.Fatal(err)
	}
	var flat []float32
	for _, s := range scored {
		flat = append(flat, s.LogProbs...)
	}
	return flat
}

// maxParityDiff checks got against want element by element (parityDiff ≤ parityTolerance) and
// returns the largest parityDiff.
func maxParityDiff(t *testing.T, what string, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values on xla, %d on cpu", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		d := parityDiff(got[i], want[i])
		if !(d <= parityTolerance) { // NaN fails too
			t.Errorf("%s[%d]: xla %v, cpu %v", what, i, got[i], want[i])
			return d
		}
		worst = max(worst, d)
	}
	return worst
}

// lossAndGradients returns the SFT loss (sftLoss) of mb and its gradient with respect to every
// parameter, as a Trainer computes them for its update.
func lossAndGradients(t *testing.T, b *Backend, m *Model, mb map[string]*tensors.Tensor) (loss float32, grads map[string][]float32) {
	t.Helper()
	tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{Kind: "constant", BaseLR: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	args, err := MicroBatchArgs(&tr.keys, batch1(mb))
	if err != nil {
		t.Fatal(err)
	}
	exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		loss, _, grads := tr.lossAndGrads(ctx, in)
		return append([]*Node{loss}, grads...)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Exec(args[0]...)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1+len(m.Params()) {
		t.Fatalf("%d gradients for %d parameters", len(out)-1, len(m.Params()))
	}
	grads = map[string][]float32{}
	for i := range out[1:] {
		grads[tr.paramName(i)] = tensors.MustCopyFlatData[float32](out[1+i])
	}
	return tensors.ToScalar[float32](out[0]), grads
}

// TestXLAMatchesCPULogProbsLossAndGradients: on the same weights, the xla backend (every
// installed XLA CPU plugin) gives the cpu backend's per-token log-probs of ragged sequences
// (scored with padding), SFT loss of a padded batch, and gradient of that loss with respect to
// every parameter, to parityTolerance.
func TestXLAMatchesCPULogProbsLossAndGradients(t *testing.T) {
	forEachXLAPlugin(t, func(t *testing.T, xla, cpu *Backend) {
		for _, pm := range parityModels() {
			t.Run(pm.name, func(t *testing.T) {
				mx, mc := pm.new(t), pm.new(t)
				cfg := mx.Config
				seqs := randomSeqs(rand.New(rand.NewPCG(5, 6)), cfg.VocabSize, 17, 5, 11) // 4 rows of 32: one all padding
				lpWorst := maxParityDiff(t, "log-prob", scoreOn(t, xla, mx, seqs), scoreOn(t, cpu, mc, seqs))

				// Rows of 2 to 16 tokens, right-padded; one batch per backend (a tensor, once
				// transferred, belongs to one backend).
				batch := func() map[string]*tensors.Tensor { return sftBatch(rand.New(rand.NewPCG(7, 8)), cfg, 3, 16) }
				lossX, gradX := lossAndGradients(t, xla, mx, batch())
				lossC, gradC := lossAndGradients(t, cpu, mc, batch())
				lossDiff := parityDiff(lossX, lossC)
				if !(lossDiff <= parityTolerance) {
					t.Errorf("loss: xla %v, cpu %v", lossX, lossC)
				}
				gradWorst, gradMax := 0.0, 0.0
				for _, p := range mx.Params() {
					gradWorst = max(gradWorst, maxParityDiff(t, "gradient of "+p.Name, gradX[p.Name], gradC[p.Name]))
					for _, g := range gradC[p.Name] {
						gradMax = max(gradMax, math.Abs(float64(g)))
					}
				}
				if gradMax < 1e-3 {
					t.Fatalf("the gradients are all below %.3g: the comparison says nothing", gradMax)
				}
				t.Logf("max |xla − cpu|/max(1,|cpu|): log-probs %.3g, loss %.3g (%.6f), gradients %.3g (largest |gradient| %.3g)",
					lpWorst, lossDiff, lossC, gradWorst, gradMax)
			})
		}
	})
}

// TestXLAMatchesCPUOnBF16Weights: a model stored in bfloat16 (loaded as float32 values, as stx
// loads any bf16 checkpoint) scores the same log-probs on the xla backend as on the cpu backend.
func TestXLAMatchesCPUOnBF16Weights(t *testing.T) {
	forEachXLAPlugin(t, func(t *testing.T, xla, cpu *Backend) {
		// Llama 3.2's layout (GQA, tied embeddings, the llama3 RoPE frequency bands): one case,
		// each more is a graph for XLA to compile (about a second).
		for _, tc := range []archCase{archCases()[1]} {
			t.Run(tc.name, func(t *testing.T) {
				dir := writeArchCheckpoint(t, tc, 7)
				mx, err := LoadModel(dir)
				if err != nil {
					t.Fatal(err)
				}
				mc, err := LoadModel(dir)
				if err != nil {
					t.Fatal(err)
				}
				if dt := mx.SaveDType("model.embed_tokens.weight"); dt != tc.dtype {
					t.Fatalf("the model was loaded as %s, want %s", dt, tc.dtype)
				}
				seqs := randomSeqs(rand.New(rand.NewPCG(1, 2)), mx.Config.VocabSize, tc.lengths...)
				worst := maxParityDiff(t, "log-prob", scoreOn(t, xla, mx, seqs), scoreOn(t, cpu, mc, seqs))
				t.Logf("max |xla − cpu|/max(1,|cpu|) of the log-probs: %.3g", worst)
			})
		}
	})
}

// TestXLASamplerMatchesCPU: the KV-cache sampler on the xla backend (its decode steps as
// graphs) gives tokens whose log-probs match a full forward of prompt+continuation, on xla and
// on the cpu backend, to parityTolerance; greedy decoding gives the cpu backend's tokens (its
// sampler decodes on the host), and so does sampling at temperature 1 with the same seed (the
// same uniform draws over probabilities that differ by float32 roundings).
func TestXLASamplerMatchesCPU(t *testing.T) {
	forEachXLAPlugin(t, func(t *testing.T, xla, cpu *Backend) {
		pm := parityModels()[1] // GQA, biases, tied embeddings
		mx, mc := pm.new(t), pm.new(t)
		sx, err := NewSampler(xla, mx)
		if err != nil {
			t.Fatal(err)
		}
		if sx.hostDecode {
			t.Fatal("the xla backend's sampler decodes on the host")
		}
		sCPU, err := NewSampler(cpu, mc)
		if err != nil {
			t.Fatal(err)
		}
		scoreX, err := NewScorer(xla, mx)
		if err != nil {
			t.Fatal(err)
		}
		scoreC, err := NewScorer(cpu, mc)
		if err != nil {
			t.Fatal(err)
		}
		prompts := randomSeqs(rand.New(rand.NewPCG(9, 9)), mx.Config.VocabSize, 3, 12, 1, 7)
		for _, opt := range []SampleOptions{{MaxNewTokens: 16, Seed: 4}, {MaxNewTokens: 16, Temperature: 1, Seed: 4}} {
			name := "greedy"
			if opt.Temperature > 0 {
				name = "temperature-1"
			}
			t.Run(name, func(t *testing.T) {
				gotX, err := sx.Generate(prompts, opt)
				if err != nil {
					t.Fatal(err)
				}
				gotC, err := sCPU.Generate(prompts, opt)
				if err != nil {
					t.Fatal(err)
				}
				var full [][]int32
				var sampled []float32
				for i, p := range prompts {
					full = append(full, slices.Concat(p, gotX[i].Tokens))
					sampled = append(sampled, gotX[i].LogProbs...)
				}
				// The full forward's log-probs of the generated tokens, on each backend.
				generated := func(sc *Scorer) []float32 {
					scored, err := sc.Score(full)
					if err != nil {
						t.Fatal(err)
					}
					var out []float32
					for i, p := range prompts {
						out = append(out, scored[i].LogProbs[len(p)-1:]...)
					}
					return out
				}
				own := maxParityDiff(t, "sampled log-prob vs xla full forward", sampled, generated(scoreX))
				cross := maxParityDiff(t, "sampled log-prob vs cpu full forward", sampled, generated(scoreC))
				for i := range prompts {
					if !reflect.DeepEqual(gotX[i].Tokens, gotC[i].Tokens) {
						t.Errorf("row %d: xla sampled %v, cpu %v", i, gotX[i].Tokens, gotC[i].Tokens)
					}
				}
				t.Logf("max |sampled − full forward|/max(1,|.|): xla %.3g, cpu %.3g", own, cross)
			})
		}
	})
}
