package runtime

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"stx.dev/stx/internal/plainfile"
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

// LoadModel reads a Hugging Face model directory: config.json (see ParseHFConfig for the
// supported architectures) and model.safetensors or its sharded form. Weights of any float
// dtype are converted to float32, and SaveHF writes each tensor back in its file's dtype;
// missing tensors, wrong shapes, non-float dtypes and unexpected tensors are errors. The
// config and then the safetensors headers are checked before any weight is read.
func LoadModel(dir string) (*Model, error) { return loadModel(dir, nil) }

// heldTensor, when it returns a tensor, is what a tensor's variable holds instead of the
// file's values widened to float32 (a LoRA model's frozen base kept in bfloat16, lora_base.go).
type heldTensor func(p Param, t safetensors.Tensor) (*tensors.Tensor, error)

// loadModel is LoadModel with the tensors that hold picks held as it says.
func loadModel(dir string, hold heldTensor) (*Model, error) {
	cfg, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	heads, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return nil, fmt.Errorf("loading model %s: %w", dir, err)
	}
	if _, ok := heads["score.weight"]; ok {
		cfg.HasValueHead = true
	}
	if err := checkTensorHeaders(cfg, heads); err != nil {
		return nil, fmt.Errorf("loading model %s: %w", dir, err)
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading model %s: %w", dir, err)
	}
	m := newEmptyModel(context.New(), "", cfg)
	if err := m.setFromTensors(ts, true, hold); err != nil {
		return nil, fmt.Errorf("loading model %s: %w", dir, err)
	}
	m.source = dir
	if raw, err := plainfile.ReadFile(filepath.Join(dir, "config.json"), maxConfigFile); err == nil {
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
	heads, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	if err := checkTensorHeaders(m.Config, heads); err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	if err := m.setFromTensors(ts, true, nil); err != nil {
		return fmt.Errorf("loading weights from %s: %w", dir, err)
	}
	return nil
}

// sameShapes reports a difference between two configs that would change the tensors.
func (c Config) sameShapes(o Config) error {
	if c.Architecture != o.Architecture || c.VocabSize != o.VocabSize || c.Hidden != o.Hidden ||
		c.Layers != o.Layers || c.Heads != o.Heads || c.KVHeads != o.KVHeads || c.HeadDim() != o.HeadDim() ||
		c.Intermediate != o.Intermediate || c.TieEmbeddings != o.TieEmbeddings || c.AttentionBias != o.AttentionBias ||
		c.OutputBias != o.OutputBias || c.QKNorm != o.QKNorm {
		return fmt.Errorf("model config differs: have %s vocab %d hidden %d layers %d heads %d/%d×%d intermediate %d tied %v bias %v/%v, file has %s vocab %d hidden %d layers %d heads %d/%d×%d intermediate %d tied %v bias %v/%v",
			c.Architecture, c.VocabSize, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim(), c.Intermediate, c.TieEmbeddings, c.AttentionBias, c.OutputBias,
			o.Architecture, o.VocabSize, o.Hidden, o.Layers, o.Heads, o.KVHeads, o.HeadDim(), o.Intermediate, o.TieEmbeddings, o.AttentionBias, o.OutputBias)
	}
	return nil
}

// setFromTensors assigns every model tensor from ts. With strict, tensors that the model does
// not have are an error, except rotary inv_freq buffers and a tied model's lm_head copy.
func (m *Model) setFromTensors(ts map[string]safetensors.Tensor, strict bool, hold heldTensor) error {
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
		if m.dtypes == nil {
			m.dtypes = map[string]safetensors.DType{}
		}
		if hold != nil {
			ht, err := hold(p, t)
			if err != nil {
				return err
			}
			if ht != nil {
				if err := m.setTensor(p.Name, ht); err != nil {
					return err
				}
				m.dtypes[p.Name] = t.DType
				continue
			}
		}
		if done, err := m.decodeParam(p, t); err != nil { // BF16 and F32 without a copy (weights_decode.go)
			return err
		} else if done {
			m.dtypes[p.Name] = t.DType
			continue
		}
		data, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("tensor %q: %w", p.Name, err)
		}
		// A NaN or Inf weight would surface as a non-finite loss blamed on
		// whatever data came first: name the tensor instead.
		if i := slices.IndexFunc(data, func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }); i >= 0 {
			return fmt.Errorf("tensor %q: element %d is %v: the weights are not finite", p.Name, i, data[i])
		}
		if err := m.SetParam(p.Name, data); err != nil {
			return err
		}
		m.dtypes[p.Name] = t.DType
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

// SaveDType returns the dtype SaveHF writes the named tensor in: that of the file it was
// loaded from, for a tensor the file did not have that of the embeddings, else F32.
func (m *Model) SaveDType(name string) safetensors.DType {
	if dt, ok := m.dtypes[name]; ok {
		return dt
	}
	if dt, ok := m.dtypes["model.embed_tokens.weight"]; ok {
		return dt
	}
	return safetensors.F32
}

// torchDTypes names the dtypes as config.json's torch_dtype does.
var torchDTypes = map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16",
	safetensors.F16: "float16", safetensors.F64: "float64"}

// Tensors returns the model's weights as safetensors in canonical order, each in its
// SaveDType (narrowed from float32 with round-to-nearest-even).
func (m *Model) Tensors() ([]safetensors.Tensor, error) {
	out := make([]safetensors.Tensor, 0, len(m.params))
	for _, t := range m.lazyTensors() {
		data, err := t.Fill()
		if err != nil {
			return nil, err
		}
		t.Data, t.Fill = data, nil
		out = append(out, t)
	}
	return out, nil
}

// lazyTensors is Tensors with each tensor's data read and encoded only when it is written.
func (m *Model) lazyTensors() []safetensors.Tensor {
	ts := make([]safetensors.Tensor, 0, len(m.params))
	for _, p := range m.params {
		dt := m.SaveDType(p.Name)
		ts = append(ts, safetensors.Tensor{Name: p.Name, DType: dt, Shape: p.Shape,
			Fill: func() ([]byte, error) { return encodedValues(m.Variable(p.Name), "model", p.Name, dt, p.Shape) }})
	}
	return ts
}

// SaveHF writes the model as a Hugging Face directory: config.json and model.safetensors
// (sharded into files of at most maxShardBytes when positive and needed), each tensor in the
// dtype it was loaded in (float32 for a new model), tensor names and [out, in] orientation as
// transformers writes them. Each file is replaced atomically.
func (m *Model) SaveHF(dir string, maxShardBytes int64) error {
	// Each tensor is read and encoded as it is written: a real-size model never holds a
	// second copy of all its weights while saving.
	ts := m.lazyTensors()
	if err := safetensors.WriteDir(dir, ts, maxShardBytes); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	js, err := m.Config.HFConfigJSON()
	if err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	var ours map[string]any
	if err := json.Unmarshal(js, &ours); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	ours["torch_dtype"] = torchDTypes[m.SaveDType("model.embed_tokens.weight")]
	if m.sourceConfig != nil {
		// Keep the original's other fields (generation defaults, sliding-window settings,
		// transformers_version, ...); the fields this package models are written as it has them.
		if _, ok := m.sourceConfig["dtype"]; ok { // transformers v5's name of torch_dtype
			ours["dtype"] = ours["torch_dtype"]
		}
		merged := maps.Clone(m.sourceConfig)
		maps.Copy(merged, ours)
		ours = merged
	}
	if js, err = json.MarshalIndent(ours, "", "  "); err != nil {
		return fmt.Errorf("saving model: %w", err)
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
	// CreateTemp makes the file 0600; a written model file is readable like any other.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
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

// encodedValues returns the values of v, owner's tensor name of the given shape, encoded as dt,
// read straight from the variable's tensor: a checkpoint of a real-size model then holds one
// encoded copy of the tensor being written, not a float32 copy as well.
func encodedValues(v *context.Variable, owner, name string, dt safetensors.DType, shape []int) ([]byte, error) {
	if v == nil {
		return nil, fmt.Errorf("%s has no tensor %q", owner, name)
	}
	t, err := v.Value()
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", name, err)
	}
	var out safetensors.Tensor
	var inner error
	if t.DType() != dtypes.Float32 {
		data, err := tensorFloat32s(t) // a frozen base held in bfloat16 (lora_base.go)
		if err != nil {
			return nil, fmt.Errorf("reading %q: %w", name, err)
		}
		out, inner = safetensors.FromFloat32As(name, dt, shape, data)
		return out.Data, inner
	}
	err = tensors.ConstFlatData(t, func(data []float32) {
		out, inner = safetensors.FromFloat32As(name, dt, shape, data)
	})
	if err = firstErr(err, inner); err != nil {
		return nil, fmt.Errorf("encoding %q: %w", name, err)
	}
	return out.Data, nil
}

// float32Bytes is encodedValues as float32 into *buf, grown as needed and reused by the next
// call: the caller must be done with the bytes before it calls again.
func float32Bytes(buf *[]byte, v *context.Variable, owner, name string, shape []int) ([]byte, error) {
	if v == nil {
		return nil, fmt.Errorf("%s has no tensor %q", owner, name)
	}
	t, err := v.Value()
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", name, err)
	}
	if t.DType() != dtypes.Float32 {
		return encodedValues(v, owner, name, safetensors.F32, shape)
	}
	var out []byte
	err = tensors.ConstFlatData(t, func(data []float32) {
		if n := 4 * len(data); cap(*buf) < n {
			*buf = make([]byte, n)
		}
		out = (*buf)[:4*len(data)]
		for i, x := range data {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("encoding %q: %w", name, err)
	}
	return out, nil
}
