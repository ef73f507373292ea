package runtime

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/runtime/safetensors"
)

// archCase is a tiny checkpoint of one architecture, written as a Hugging Face directory: the
// config.json as transformers writes it for that family, random weights in dtype.
type archCase struct {
	name   string
	config string // config.json
	dtype  safetensors.DType
	// without removes the feature the case exists for, to show that the test sees it: the
	// float64 reference without it must differ from the model.
	without func(*Config)
	lengths []int // scored sequence lengths
}

func archCases() []archCase {
	return []archCase{
		{name: "llama2-f16", dtype: safetensors.F16, lengths: []int{17, 5, 11}, config: `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.2, "intermediate_size": 48,
  "max_position_embeddings": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "torch_dtype": "float16", "vocab_size": 61}`},
		// Llama 3.2's layout: GQA, tied embeddings, explicit head_dim, an eos list and the
		// llama3 frequency bands, shrunk so that the 8 pairs of a 16-wide head fall in all
		// three bands (wavelengths 6.3 | 19.9, 62.8 | 199 …, band edges 16 and 64).
		{name: "llama3-rope-llama3-bf16", dtype: safetensors.BF16, lengths: []int{30, 9}, config: `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false, "bos_token_id": 128,
  "eos_token_id": [1, 2, 3], "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.2,
  "intermediate_size": 96, "max_position_embeddings": 512, "mlp_bias": false, "num_attention_heads": 4,
  "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 64, "rope_type": "llama3"},
  "rope_theta": 10000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 130}`,
			without: func(c *Config) { c.RopeScaling = RopeScaling{} }},
		{name: "llama-linear-rope-attention-bias", dtype: safetensors.F32, lengths: []int{25, 4}, config: `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": true, "hidden_size": 32,
  "initializer_range": 0.2, "intermediate_size": 40, "max_position_embeddings": 128, "num_attention_heads": 4,
  "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_theta": 100.0,
  "rope_scaling": {"type": "linear", "factor": 4.0}, "vocab_size": 50}`,
			without: func(c *Config) { c.RopeScaling = RopeScaling{} }},
		// Mistral with a sliding window shorter than the longest sequence and, as Mistral
		// NeMo, head_dim·heads ≠ hidden.
		{name: "mistral-sliding-window", dtype: safetensors.BF16, lengths: []int{19, 6, 3}, config: `{
  "architectures": ["MistralForCausalLM"], "model_type": "mistral", "bos_token_id": 1, "eos_token_id": 2,
  "head_dim": 12, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.2, "intermediate_size": 48,
  "max_position_embeddings": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": 6, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 70}`,
			without: func(c *Config) { c.SlidingWindow = 0 }},
		{name: "qwen2-bias-tied", dtype: safetensors.BF16, lengths: []int{17, 5, 30}, config: `{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0, "bos_token_id": 3,
  "eos_token_id": 4, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.2, "intermediate_size": 40,
  "max_position_embeddings": 128, "max_window_layers": 2, "num_attention_heads": 4, "num_hidden_layers": 2,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 128,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 50}`,
			without: func(c *Config) { c.AttentionBias = false }},
		// Qwen3: per-head q/k RMSNorm, head_dim 16 with hidden 32 and 4 heads (query width 64).
		{name: "qwen3-qk-norm-head-dim", dtype: safetensors.BF16, lengths: []int{21, 8}, config: `{
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false, "bos_token_id": 3,
  "eos_token_id": 4, "head_dim": 16, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.2,
  "intermediate_size": 48, "max_position_embeddings": 256, "max_window_layers": 2, "num_attention_heads": 4,
  "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "use_sliding_window": false, "vocab_size": 60}`,
			without: func(c *Config) { c.QKNorm = false }},
	}
}

// writeArchCheckpoint writes tc as a model directory with random weights: matrices N(0, 0.2²)
// and, so that they are exercised, norm weights around 1 and biases around 0.
func writeArchCheckpoint(t testing.TB, tc archCase, seed uint64) string {
	t.Helper()
	cfg, err := ParseHFConfig([]byte(tc.config))
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var ts []safetensors.Tensor
	for _, p := range paramList(cfg) {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		data := make([]float32, n)
		for i := range data {
			v := rng.NormFloat64() * cfg.InitStd
			switch {
			case strings.HasSuffix(p.Name, "norm.weight"):
				v = 1 + rng.NormFloat64()*0.3
			case strings.HasSuffix(p.Name, ".bias"):
				v = rng.NormFloat64() * 0.3
			}
			data[i] = float32(v)
		}
		st, err := safetensors.FromFloat32As(p.Name, tc.dtype, p.Shape, data)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, st)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteDir(dir, ts, 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestArchitecturesMatchFloat64Reference loads each architecture's checkpoint and checks the
// scorer's log-probs and entropies against the float64 reference to 1e-4, and that the
// reference without the case's feature is measurably different.
func TestArchitecturesMatchFloat64Reference(t *testing.T) {
	b := testBackend(t)
	for _, tc := range archCases() {
		t.Run(tc.name, func(t *testing.T) {
			m, err := LoadModel(writeArchCheckpoint(t, tc, 5))
			if err != nil {
				t.Fatal(err)
			}
			seqs := randomSeqs(rand.New(rand.NewPCG(1, 2)), m.Config.VocabSize, tc.lengths...)
			ref, err := newRefModel(m)
			if err != nil {
				t.Fatal(err)
			}
			worst := checkScorerAgainstReference(t, b, m, ref, seqs)
			featureEffect := 0.0
			if tc.without != nil {
				other := &refModel{c: m.Config, w: ref.w}
				tc.without(&other.c)
				for _, s := range seqs {
					want, _ := ref.logProbs(s)
					lp, _ := other.logProbs(s)
					for j := range lp {
						featureEffect = max(featureEffect, math.Abs(lp[j]-want[j]))
					}
				}
			}
			t.Logf("max |log-prob − float64 reference| = %.3g; without the feature the reference moves by %.3g", worst, featureEffect)
			if tc.without != nil && featureEffect < 1e-2 {
				t.Errorf("the case's feature changes the reference log-probs by only %.3g: the test would not see it missing", featureEffect)
			}
		})
	}
}

// TestArchitecturesSamplerMatchesFullForward checks, per architecture, that generation (host
// decoder and graph decode) gives the log-probs a full forward gives the same tokens.
func TestArchitecturesSamplerMatchesFullForward(t *testing.T) {
	b := testBackend(t)
	for _, tc := range archCases() {
		for _, host := range []bool{true, false} {
			name := tc.name + "/graph-decode"
			if host {
				name = tc.name + "/host-decode"
			}
			t.Run(name, func(t *testing.T) {
				m, err := LoadModel(writeArchCheckpoint(t, tc, 6))
				if err != nil {
					t.Fatal(err)
				}
				lengths, newTokens := []int{1, 9, 4}, 12
				if w := m.Config.SlidingWindow; w > 0 {
					// Generation stays within the window (longer is refused).
					lengths, newTokens = []int{1, 3, 2}, w-3
				}
				prompts := randomSeqs(rand.New(rand.NewPCG(3, 3)), m.Config.VocabSize, lengths...)
				s, err := NewSampler(b, m)
				if err != nil {
					t.Fatal(err)
				}
				s.hostDecode = host
				samples, err := s.Generate(prompts, SampleOptions{MaxNewTokens: newTokens, Temperature: 1, Seed: 9})
				if err != nil {
					t.Fatal(err)
				}
				var full [][]int32
				for i, p := range prompts {
					full = append(full, append(append([]int32{}, p...), samples[i].Tokens...))
				}
				sc, err := NewScorer(b, m)
				if err != nil {
					t.Fatal(err)
				}
				scored, err := sc.Score(full)
				if err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for i, p := range prompts {
					if len(samples[i].Tokens) != newTokens {
						t.Fatalf("row %d: %d tokens, want %d", i, len(samples[i].Tokens), newTokens)
					}
					for j, lp := range samples[i].LogProbs {
						want := scored[i].LogProbs[len(p)-1+j]
						d := math.Abs(float64(lp - want))
						worst = max(worst, d)
						if d > 1e-4 {
							t.Errorf("row %d token %d: sampler log-prob %v, full forward %v", i, j, lp, want)
						}
					}
				}
				t.Logf("max |sampler − full forward| = %.3g", worst)
			})
		}
	}
}

// TestSlidingWindowGenerationRefused: generating past the window is an error, not a silently
// different model.
func TestSlidingWindowGenerationRefused(t *testing.T) {
	tc := archCases()[3]
	m, err := LoadModel(writeArchCheckpoint(t, tc, 1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Generate([][]int32{{1, 2, 3}}, SampleOptions{MaxNewTokens: 4, Temperature: 1})
	if err == nil || !strings.Contains(err.Error(), "sliding attention window of 6") {
		t.Fatalf("error %v, want one about the sliding window", err)
	}
}

// TestNarrowDTypesSavedBack loads bf16 and f16 checkpoints and saves them: the tensors come
// back in their dtype with the same bytes, config.json says so, and a training checkpoint of
// a bf16 model is bf16 yet resumes from the exact float32 weights.
func TestNarrowDTypesSavedBack(t *testing.T) {
	for _, tc := range []archCase{archCases()[0], archCases()[5]} {
		t.Run(string(tc.dtype), func(t *testing.T) {
			src := writeArchCheckpoint(t, tc, 2)
			m, err := LoadModel(src)
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			if err := m.SaveHF(out, 0); err != nil {
				t.Fatal(err)
			}
			a, err := safetensors.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			c, err := safetensors.ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			for name, ta := range a {
				tb := c[name]
				if tb.DType != tc.dtype || string(tb.Data) != string(ta.Data) {
					t.Fatalf("%s: saved as %s with different bytes (%v), want the source's %s bytes", name, tb.DType, string(tb.Data) != string(ta.Data), tc.dtype)
				}
			}
			var js map[string]any
			raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
			if err := json.Unmarshal(raw, &js); err != nil {
				t.Fatal(err)
			}
			if want := torchDTypes[tc.dtype]; js["torch_dtype"] != want {
				t.Errorf("torch_dtype %v, want %s", js["torch_dtype"], want)
			}
		})
	}

	// Checkpoint of a trained bf16 model.
	tc := archCases()[5]
	m, err := LoadModel(writeArchCheckpoint(t, tc, 3))
	if err != nil {
		t.Fatal(err)
	}
	b := testBackend(t)
	cfg := TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{Kind: "constant", BaseLR: 1e-2, TotalSteps: 10}}
	tr, err := NewTrainer(b, m, sftLoss, cfg)
	if err != nil {
		t.Fatal(err)
	}
	padded := m.Config
	padded.PAD = 0 // the config has no pad id
	if _, err := tr.Step(batch1(sftBatch(newTestRand(), padded, 2, 9))); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tr.SaveCheckpoint(dir, nil); err != nil {
		t.Fatal(err)
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dt := ts["model.embed_tokens.weight"].DType; dt != safetensors.BF16 {
		t.Fatalf("checkpoint of a bf16 model holds %s weights", dt)
	}
	m2, err := LoadModel(writeArchCheckpoint(t, tc, 4))
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := NewTrainer(b, m2, sftLoss, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.LoadCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		x, _ := m.ParamValues(p.Name)
		y, _ := m2.ParamValues(p.Name)
		if !sameBits(x, y) {
			t.Fatalf("%s: resumed weights differ from the trained float32 weights", p.Name)
		}
	}
}
