package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"stx.dev/stx/runtime/safetensors"
)

// OpenModel returns the model named by spec: a built-in config name ("tiny", "bench"),
// initialised from seed, or a Hugging Face model directory (config.json + safetensors).
func OpenModel(spec string, seed uint64) (*Model, error) {
	if cfg, ok := BuiltinConfig(spec); ok {
		return NewModel(cfg, seed)
	}
	st, err := os.Stat(spec)
	if err != nil {
		return nil, fmt.Errorf("model %q is neither a built-in config (%s) nor a model directory: %w",
			spec, strings.Join(BuiltinConfigNames(), ", "), err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("model %q: not a directory (want a Hugging Face model directory or one of %s)",
			spec, strings.Join(BuiltinConfigNames(), ", "))
	}
	return LoadModel(spec)
}

// LoadModel reads a Hugging Face model directory: config.json (LlamaForCausalLM or
// Qwen2ForCausalLM) and model.safetensors or its sharded form. Weights of any float dtype are
// converted to float32; missing tensors, wrong shapes, non-float dtypes and unexpected tensors
// are errors.
func LoadModel(dir string) (*Model, error) {
	cfg, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading model %s: %w", dir, err)
	}
	if _, ok := ts["score.weight"]; ok {
		cfg.HasValueHead = true
	}
	m := newEmptyModel(context.New(), "", cfg)
	if err := m.setFromTensors(ts, true); err != nil {
		return nil, fmt.Errorf("loading model %s: %w", dir, err)
	}
	m.source = dir
	if raw, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		_ = json.Unmarshal(raw, &m.sourceConfig) // already parsed once by ReadHFConfig
	}
	return m, nil
}

// LoadWeights replaces m's weights with those of a Hugging Face model directory of the same
// configuration.
func (m *Model) LoadWeights(dir string) error {
	cfg, err := ReadHFConfig(dir)
	if err != nil {
		return err
	}
	if err := m.Config.sameShapes(cfg); err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	if err := m.setFromTensors(ts, true); err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	return nil
}

// sameShapes reports a difference between two configs that would change the tensors.
func (c Config) sameShapes(o Config) error {
	if c.Architecture != o.Architecture || c.VocabSize != o.VocabSize || c.Hidden != o.Hidden ||
		c.Layers != o.Layers || c.Heads != o.Heads || c.KVHeads != o.KVHeads ||
		c.Intermediate != o.Intermediate || c.TieEmbeddings != o.TieEmbeddings || c.AttentionBias != o.AttentionBias {
		return fmt.Errorf("model config differs: have %s vocab %d hidden %d layers %d heads %d/%d intermediate %d tied %v bias %v, file has %s vocab %d hidden %d layers %d heads %d/%d intermediate %d tied %v bias %v",
			c.Architecture, c.VocabSize, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Intermediate, c.TieEmbeddings, c.AttentionBias,
			o.Architecture, o.VocabSize, o.Hidden, o.Layers, o.Heads, o.KVHeads, o.Intermediate, o.TieEmbeddings, o.AttentionBias)
	}
	return nil
}

// setFromTensors assigns every model tensor from ts. With strict, tensors that the model does
// not have are an error, except rotary inv_freq buffers and a tied model's lm_head copy.
func (m *Model) setFromTensors(ts map[string]safetensors.Tensor, strict bool) error {
	want := map[string]bool{}
	for _, p := range m.params {
		want[p.Name] = true
		t, ok := ts[p.Name]
		if !ok {
			return fmt.Errorf("missing tensor %q", p.Name)
		}
		if !slices.Equal(t.Shape, p.Shape) {
			return fmt.Errorf("tensor %q has shape %v, want %v", p.Name, t.Shape, p.Shape)
		}
		if !t.DType.IsFloat() {
			return fmt.Errorf("tensor %q has dtype %s, want a float type (F32, F16, BF16, F64)", p.Name, t.DType)
		}
		data, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("tensor %q: %w", p.Name, err)
		}
		if err := m.SetParam(p.Name, data); err != nil {
			return err
		}
	}
	if !strict {
		return nil
	}
	var extra []string
	for name := range ts {
		switch {
		case want[name], strings.HasSuffix(name, "rotary_emb.inv_freq"),
			name == "lm_head.weight" && m.Config.TieEmbeddings:
		default:
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		if len(extra) > 5 {
			extra = append(extra[:5], "...")
		}
		return fmt.Errorf("unexpected tensors for a %s model: %s", m.Config.Architecture, strings.Join(extra, ", "))
	}
	return nil
}

// Tensors returns the model's weights as float32 safetensors, in canonical order.
func (m *Model) Tensors() ([]safetensors.Tensor, error) {
	out := make([]safetensors.Tensor, 0, len(m.params))
	for _, p := range m.params {
		data, err := m.ParamValues(p.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, safetensors.FromFloat32(p.Name, p.Shape, data))
	}
	return out, nil
}

// SaveHF writes the model as a Hugging Face directory: config.json and model.safetensors
// (sharded into files of at most maxShardBytes when positive and needed), float32, tensor
// names and [out, in] orientation as transformers writes them. Each file is replaced atomically.
func (m *Model) SaveHF(dir string, maxShardBytes int64) error {
	ts, err := m.Tensors()
	if err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	if err := safetensors.WriteDir(dir, ts, maxShardBytes); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	js, err := m.Config.HFConfigJSON()
	if err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	if m.sourceConfig != nil {
		// Keep the original's other fields (generation defaults, sliding-window settings,
		// transformers_version, ...); the fields this package models are written as it has them.
		var ours map[string]any
		if err := json.Unmarshal(js, &ours); err != nil {
			return fmt.Errorf("saving model: %w", err)
		}
		merged := maps.Clone(m.sourceConfig)
		maps.Copy(merged, ours)
		merged["torch_dtype"] = "float32"
		if js, err = json.MarshalIndent(merged, "", "  "); err != nil {
			return fmt.Errorf("saving model: %w", err)
		}
	}
	if err := writeFileAtomic(filepath.Join(dir, "config.json"), append(js, '\n')); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	if m.source != "" {
		if err := copyTokenizerFiles(m.source, dir); err != nil {
			return fmt.Errorf("saving model: %w", err)
		}
	}
	return nil
}

// tokenizerFiles are the files of a Hugging Face model directory that describe its tokenizer
// and generation defaults; they are copied along with saved weights.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"generation_config.json", "vocab.json", "merges.txt"}

func copyTokenizerFiles(from, to string) error {
	if a, errA := filepath.Abs(from); errA == nil {
		if b, errB := filepath.Abs(to); errB == nil && a == b {
			return nil
		}
	}
	for _, name := range tokenizerFiles {
		data, err := ReadModelFile(from, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(to, name), data); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it into place.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
