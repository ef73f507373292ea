package runtime

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"stx.dev/stx/runtime/safetensors"
)

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestHFSaveLoadRoundTrip(t *testing.T) {
	bench, _ := BuiltinConfig("bench")
	bench.Layers = 1 // keep the files small
	valued := smallGQA()
	valued.HasValueHead = true
	cases := []struct {
		name  string
		cfg   Config
		shard int64
	}{
		{"llama-untied", bench, 0},
		{"qwen2-tied-bias-sharded", smallGQA(), 4096},
		{"value-head", valued, 0},
	}
	b := testBackend(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewModel(tc.cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := m.SaveHF(dir, tc.shard); err != nil {
				t.Fatal(err)
			}
			if tc.shard > 0 {
				if _, err := os.Stat(filepath.Join(dir, safetensors.IndexFileName)); err != nil {
					t.Fatalf("sharded save wrote no index: %v", err)
				}
			}
			back, err := OpenModel(dir, 99)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Config, m.Config) {
				t.Fatalf("config round trip:\n got %+v\nwant %+v", back.Config, m.Config)
			}
			for _, p := range m.Params() {
				a, _ := m.ParamValues(p.Name)
				c, err := back.ParamValues(p.Name)
				if err != nil || !sameBits(a, c) {
					t.Fatalf("tensor %s differs after the round trip (%v)", p.Name, err)
				}
			}
			// Forward is bit-identical after save → load.
			seqs := randomSeqs(rand.New(rand.NewPCG(4, 4)), tc.cfg.VocabSize, 11, 6)
			s1, _ := NewScorer(b, m)
			s2, _ := NewScorer(b, back)
			r1, err1 := s1.Score(seqs)
			r2, err2 := s2.Score(seqs)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for i := range r1 {
				if !sameBits(r1[i].LogProbs, r2[i].LogProbs) {
					t.Fatalf("row %d: log-probs differ after save → load", i)
				}
			}
		})
	}
}

func TestHFConfigNames(t *testing.T) {
	m, err := NewModel(smallGQA(), 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.SaveHF(dir, 0); err != nil {
		t.Fatal(err)
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	q := ts["model.layers.1.self_attn.q_proj.weight"]
	k := ts["model.layers.0.self_attn.k_proj.weight"]
	if !reflect.DeepEqual(q.Shape, []int{32, 32}) || !reflect.DeepEqual(k.Shape, []int{16, 32}) || q.DType != safetensors.F32 {
		t.Errorf("q_proj %s%v, k_proj %v: want F32 [out, in] = [32 32], [16 32]", q.DType, q.Shape, k.Shape)
	}
	if _, ok := ts["model.layers.0.self_attn.v_proj.bias"]; !ok {
		t.Error("qwen2 model saved without v_proj.bias")
	}
	if _, ok := ts["lm_head.weight"]; ok {
		t.Error("tied model saved an lm_head")
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	for _, want := range []string{`"Qwen2ForCausalLM"`, `"num_key_value_heads": 2`, `"tie_word_embeddings": true`, `"model_type": "qwen2"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("config.json lacks %s:\n%s", want, raw)
		}
	}
}

func TestLoadBadModelDirectories(t *testing.T) {
	m, err := NewModel(smallGQA(), 1)
	if err != nil {
		t.Fatal(err)
	}
	good, err := m.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	cfgJSON, _ := m.Config.HFConfigJSON()
	write := func(t *testing.T, cfg string, ts []safetensors.Tensor) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if ts != nil {
			if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFileName), ts, nil); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	edit := func(fn func(ts []safetensors.Tensor) []safetensors.Tensor) []safetensors.Tensor {
		c := append([]safetensors.Tensor(nil), good...)
		return fn(c)
	}
	cases := []struct {
		name, want string
		dir        func(t *testing.T) string
	}{
		{"unknown architecture", "unsupported architecture \"GPT2LMHeadModel\"", func(t *testing.T) string {
			return write(t, strings.Replace(string(cfgJSON), "Qwen2ForCausalLM", "GPT2LMHeadModel", 1), good)
		}},
		{"missing tensor", "missing tensor \"model.norm.weight\"", func(t *testing.T) string {
			return write(t, string(cfgJSON), edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "model.norm.weight" {
						return append(ts[:i], ts[i+1:]...)
					}
				}
				return ts
			}))
		}},
		{"wrong shape", "has shape [16 16], want [16 32]", func(t *testing.T) string {
			return write(t, string(cfgJSON), edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "model.layers.0.self_attn.k_proj.weight" {
						ts[i] = safetensors.FromFloat32(ts[i].Name, []int{16, 16}, make([]float32, 256))
					}
				}
				return ts
			}))
		}},
		{"wrong dtype", "has dtype I32", func(t *testing.T) string {
			return write(t, string(cfgJSON), edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "model.norm.weight" {
						ts[i] = safetensors.Tensor{Name: ts[i].Name, DType: safetensors.I32, Shape: ts[i].Shape, Data: ts[i].Data}
					}
				}
				return ts
			}))
		}},
		{"unexpected tensor", "unexpected tensors", func(t *testing.T) string {
			return write(t, string(cfgJSON), append(edit(func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }),
				safetensors.FromFloat32("model.layers.5.mlp.gate_proj.weight", []int{2}, []float32{1, 2})))
		}},
		{"truncated weights", "model.safetensors", func(t *testing.T) string {
			dir := write(t, string(cfgJSON), good)
			p := filepath.Join(dir, safetensors.SingleFileName)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-100); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"no weights", "has neither", func(t *testing.T) string { return write(t, string(cfgJSON), nil) }},
		{"NaN weight", `tensor "model.norm.weight": element 3 is NaN: the weights are not finite`, func(t *testing.T) string {
			return write(t, string(cfgJSON), edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "model.norm.weight" {
						v := make([]float32, ts[i].Shape[0])
						v[3] = float32(math.NaN())
						ts[i] = safetensors.FromFloat32(ts[i].Name, ts[i].Shape, v)
					}
				}
				return ts
			}))
		}},
		{"bad config json", "parsing config.json", func(t *testing.T) string { return write(t, "{", good) }},
		{"inconsistent heads", "not a multiple", func(t *testing.T) string {
			return write(t, strings.Replace(string(cfgJSON), `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1), good)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadModel(tc.dir(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := OpenModel("no-such-model", 0); err == nil || !strings.Contains(err.Error(), "neither a built-in config") {
		t.Errorf("OpenModel of a missing name: %v", err)
	}
}

// sftLoss is a masked next-token NLL, used to exercise training end to end.
func sftLoss(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
	logits := m.Logits(ctx, m.Forward(ctx, batch["tokens"]))
	nll := Neg(MaskedMean(LogProbs(logits, batch["targets"]), batch["mask"]))
	return nll, map[string]*Node{"entropy": MaskedMean(StopGradient(Entropy(logits)), batch["mask"])}
}

func sftBatch(rng *rand.Rand, cfg Config, rows, length int) map[string]*tensors.Tensor {
	lengths := make([]int, rows)
	for i := range lengths {
		lengths[i] = 2 + rng.IntN(length-1)
	}
	seqs := randomSeqs(rng, cfg.VocabSize, lengths...)
	tokens, mask, _ := PadTokens(seqs, rows, length, int32(cfg.PAD))
	targets, tmask := ShiftTargets(tokens, mask, rows, length, int32(cfg.PAD))
	return map[string]*tensors.Tensor{
		"tokens":  tensors.FromFlatDataAndDimensions(tokens, rows, length),
		"targets": tensors.FromFlatDataAndDimensions(targets, rows, length),
		"mask":    tensors.FromFlatDataAndDimensions(tmask, rows, length),
	}
}

// TestCheckpointResumeIsBitExact trains 3 steps straight, and 2 steps + checkpoint + a fresh
// trainer loaded from it + 1 step: the weights must agree bit for bit.
func TestCheckpointResumeIsBitExact(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	tcfg := TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1,
		Schedule: Schedule{Kind: "cosine", BaseLR: 1e-2, TotalSteps: 10, WarmupSteps: 1}}
	rng := rand.New(rand.NewPCG(1, 2))
	var batches [][]map[string]*tensors.Tensor
	for range 3 {
		batches = append(batches, []map[string]*tensors.Tensor{sftBatch(rng, cfg, 2, 16), sftBatch(rng, cfg, 2, 16)})
	}
	newTrainer := func() *Trainer {
		m, err := NewModel(cfg, 8)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(b, m, sftLoss, tcfg)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	straight := newTrainer()
	var losses []float64
	for i, mb := range batches {
		res, err := straight.Step(mb)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (res.GradNorm <= 0 || res.Skipped || res.LR != 0) {
			t.Fatalf("first step: %+v (want lr 0 in warmup, a positive norm)", res)
		}
		losses = append(losses, res.Loss)
	}
	resumedFrom := newTrainer()
	for _, mb := range batches[:2] {
		if _, err := resumedFrom.Step(mb); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	rngState := []byte("rng-state-bytes")
	if err := resumedFrom.SaveCheckpoint(dir, rngState); err != nil {
		t.Fatal(err)
	}
	// Saving again over an existing checkpoint replaces it.
	if err := resumedFrom.SaveCheckpoint(dir, rngState); err != nil {
		t.Fatal(err)
	}
	resumed := newTrainer() // different init is overwritten by the checkpoint
	gotRNG, err := resumed.LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(gotRNG) != string(rngState) || resumed.StepCount() != 2 {
		t.Fatalf("restored rng %q step %d", gotRNG, resumed.StepCount())
	}
	res, err := resumed.Step(batches[2])
	if err != nil {
		t.Fatal(err)
	}
	if res.Loss != losses[2] {
		t.Errorf("loss after resume %v, straight run %v", res.Loss, losses[2])
	}
	for _, p := range straight.Model().Params() {
		a, _ := straight.Model().ParamValues(p.Name)
		c, _ := resumed.Model().ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("tensor %s differs between the straight and the resumed run", p.Name)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Errorf("checkpoint parent holds %d entries, want only the checkpoint (no temporaries)", len(entries))
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(77, 78)) }

func batch1(mb map[string]*tensors.Tensor) []map[string]*tensors.Tensor {
	return []map[string]*tensors.Tensor{mb}
}

// TestSaveKeepsForeignConfigAndTokenizer: a model loaded from a Hugging Face directory is saved
// with the original's other config fields and its tokenizer files.
func TestSaveKeepsForeignConfigAndTokenizer(t *testing.T) {
	m, err := NewModel(smallGQA(), 1)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := m.SaveHF(src, 0); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(src, "config.json"))
	raw = []byte(strings.Replace(string(raw), "{", `{"transformers_version": "4.45.0", "sliding_window": 4096,`, 1))
	if err := os.WriteFile(filepath.Join(src, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "tokenizer_config.json"), []byte(`{"model_max_length": 128}`), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadModel(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := loaded.SaveHF(dst, 0); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(dst, "config.json"))
	for _, want := range []string{`"transformers_version": "4.45.0"`, `"sliding_window": 4096`, `"Qwen2ForCausalLM"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("saved config.json lacks %s:\n%s", want, out)
		}
	}
	if tc, err := os.ReadFile(filepath.Join(dst, "tokenizer_config.json")); err != nil || string(tc) != `{"model_max_length": 128}` {
		t.Errorf("tokenizer_config.json not copied: %q, %v", tc, err)
	}
	again, err := LoadModel(dst)
	if err != nil || !reflect.DeepEqual(again.Config, loaded.Config) {
		t.Fatalf("reload: %v", err)
	}
}

func TestAddValueHead(t *testing.T) {
	m, err := NewModel(smallGQA(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddValueHead(3); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.SaveHF(dir, 0); err != nil {
		t.Fatal(err)
	}
	back, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	w1, _ := m.ParamValues("score.weight")
	w2, err := back.ParamValues("score.weight")
	if err != nil || !back.Config.HasValueHead || !sameBits(w1, w2) || len(w1) != 32 {
		t.Fatalf("value head round trip: %v %v", err, back.Config.HasValueHead)
	}
}
