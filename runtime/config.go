package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Architectures understood by the loader (the "architectures" field of a Hugging Face config.json).
const (
	ArchLlama = "LlamaForCausalLM"
	ArchQwen2 = "Qwen2ForCausalLM"
)

// Config describes one decoder of the Llama/Qwen2 family: token embedding, RMSNorm, RoPE
// (rotate-half), grouped-query attention, SwiGLU MLP, optional q/k/v biases and tied embeddings.
type Config struct {
	Architecture     string  // ArchLlama or ArchQwen2
	VocabSize        int     // rows of the embedding and of lm_head
	Hidden           int     // model width
	Layers           int     // decoder blocks
	Heads            int     // query heads
	KVHeads          int     // key/value heads (divides Heads)
	Intermediate     int     // SwiGLU width
	RMSNormEps       float64 // epsilon inside RMSNorm
	RopeTheta        float64 // RoPE base
	MaxPositions     int     // longest sequence the model is used with
	TieEmbeddings    bool    // lm_head shares model.embed_tokens.weight
	AttentionBias    bool    // q/k/v projections have biases (Qwen2)
	BOS, EOS, PAD    int     // special token ids (-1 if none)
	InitStd          float64 // std of the normal initialisation of matrices
	HasValueHead     bool    // adds a scalar head ("score.weight", [1, Hidden]) for value/reward roles
	BuiltinTokenizer string  // "byte" for the built-in configs; "" for checkpoints
}

// HeadDim is the per-head width.
func (c Config) HeadDim() int { return c.Hidden / c.Heads }

// Validate checks the config's internal consistency.
func (c Config) Validate() error {
	switch {
	case c.Architecture != ArchLlama && c.Architecture != ArchQwen2:
		return fmt.Errorf("model config: unsupported architecture %q (supported: %s, %s)", c.Architecture, ArchLlama, ArchQwen2)
	case c.VocabSize <= 0 || c.Hidden <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Intermediate <= 0:
		return fmt.Errorf("model config: sizes must be positive (vocab %d, hidden %d, layers %d, heads %d, kv heads %d, intermediate %d)",
			c.VocabSize, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Intermediate)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("model config: hidden size %d is not a multiple of %d heads", c.Hidden, c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: %d attention heads is not a multiple of %d key/value heads", c.Heads, c.KVHeads)
	case c.Architecture == ArchQwen2 && !c.AttentionBias:
		return fmt.Errorf("model config: %s always has q/k/v biases", ArchQwen2)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model config: head dimension %d must be even for RoPE", c.HeadDim())
	case c.RMSNormEps <= 0 || c.RopeTheta <= 0:
		return fmt.Errorf("model config: rms_norm_eps (%g) and rope_theta (%g) must be positive", c.RMSNormEps, c.RopeTheta)
	}
	return validateLimits(c)
}

// NumParams counts the model's parameters.
func (c Config) NumParams() int {
	d, kv := c.Hidden, c.KVHeads*c.HeadDim()
	perLayer := 2*d + d*d + 2*d*kv + d*d + 3*d*c.Intermediate
	if c.AttentionBias {
		perLayer += d + 2*kv
	}
	n := c.VocabSize*d + c.Layers*perLayer + d
	if !c.TieEmbeddings {
		n += c.VocabSize * d
	}
	if c.HasValueHead {
		n += d
	}
	return n
}

// Built-in named configs. Both use the byte-level tokenizer's special ids.
var builtinConfigs = map[string]Config{
	// tiny is for tests and demos: small enough to train at thousands of tokens/s on a CPU.
	"tiny": {Architecture: ArchLlama, VocabSize: 259, Hidden: 64, Layers: 2, Heads: 2, KVHeads: 1,
		Intermediate: 128, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositions: 1024,
		BOS: 257, EOS: 258, PAD: 256, InitStd: 0.02, BuiltinTokenizer: "byte"},
	// bench is the benchmark model (4.3 M parameters) compared with the PyTorch peer.
	"bench": {Architecture: ArchLlama, VocabSize: 2048, Hidden: 256, Layers: 4, Heads: 4, KVHeads: 4,
		Intermediate: 704, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositions: 2048,
		BOS: 257, EOS: 258, PAD: 256, InitStd: 0.02, BuiltinTokenizer: "byte"},
}

// BuiltinConfig returns a named built-in config ("tiny" or "bench").
func BuiltinConfig(name string) (Config, bool) {
	c, ok := builtinConfigs[name]
	return c, ok
}

// BuiltinConfigNames lists the built-in config names, sorted.
func BuiltinConfigNames() []string {
	names := make([]string, 0, len(builtinConfigs))
	for n := range builtinConfigs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// hfConfig is the subset of a Hugging Face config.json that this model family uses.
type hfConfig struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      *int     `json:"num_key_value_heads,omitempty"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	AttentionBias         *bool    `json:"attention_bias,omitempty"`
	HiddenAct             string   `json:"hidden_act"`
	BOSTokenID            *int     `json:"bos_token_id,omitempty"`
	EOSTokenID            any      `json:"eos_token_id,omitempty"`
	PADTokenID            *int     `json:"pad_token_id,omitempty"`
	TorchDType            string   `json:"torch_dtype,omitempty"`
	RopeScaling           any      `json:"rope_scaling,omitempty"`
	HeadDim               *int     `json:"head_dim,omitempty"`
	InitializerRange      float64  `json:"initializer_range,omitempty"`
	StxTokenizer          string   `json:"stx_tokenizer,omitempty"`
	UseSlidingWindow      bool     `json:"use_sliding_window,omitempty"`
	MLPBias               bool     `json:"mlp_bias,omitempty"`
}

// ReadHFConfig reads dir/config.json and maps it to a Config.
func ReadHFConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading model config: %w", err)
	}
	cfg, err := ParseHFConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseHFConfig maps the contents of a Hugging Face config.json to a Config.
func ParseHFConfig(data []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, fmt.Errorf("parsing config.json: %w", err)
	}
	if len(h.Architectures) == 0 {
		return Config{}, fmt.Errorf("config.json has no \"architectures\" (want %s or %s)", ArchLlama, ArchQwen2)
	}
	arch := h.Architectures[0]
	if arch != ArchLlama && arch != ArchQwen2 {
		return Config{}, fmt.Errorf("unsupported architecture %q (supported: %s, %s)", arch, ArchLlama, ArchQwen2)
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("unsupported hidden_act %q (want silu)", h.HiddenAct)
	}
	if h.UseSlidingWindow {
		return Config{}, fmt.Errorf("use_sliding_window is not supported")
	}
	if h.MLPBias {
		return Config{}, fmt.Errorf("mlp_bias is not supported")
	}
	if h.RopeScaling != nil {
		return Config{}, fmt.Errorf("rope_scaling is not supported (got %v)", h.RopeScaling)
	}
	c := Config{
		Architecture: arch, VocabSize: h.VocabSize, Hidden: h.HiddenSize, Layers: h.NumHiddenLayers,
		Heads: h.NumAttentionHeads, KVHeads: h.NumAttentionHeads, Intermediate: h.IntermediateSize,
		RMSNormEps: h.RMSNormEps, RopeTheta: h.RopeTheta, MaxPositions: h.MaxPositionEmbeddings,
		TieEmbeddings: h.TieWordEmbeddings, AttentionBias: arch == ArchQwen2,
		BOS: -1, EOS: -1, PAD: -1, InitStd: h.InitializerRange, BuiltinTokenizer: h.StxTokenizer,
	}
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if h.AttentionBias != nil {
		c.AttentionBias = *h.AttentionBias
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.InitStd == 0 {
		c.InitStd = 0.02
	}
	if h.HeadDim != nil && c.Heads > 0 && *h.HeadDim != c.Hidden/c.Heads {
		return Config{}, fmt.Errorf("head_dim %d differs from hidden_size/num_attention_heads = %d: not supported", *h.HeadDim, c.Hidden/c.Heads)
	}
	if h.BOSTokenID != nil {
		c.BOS = *h.BOSTokenID
	}
	if h.PADTokenID != nil {
		c.PAD = *h.PADTokenID
	}
	switch e := h.EOSTokenID.(type) {
	case float64:
		c.EOS = int(e)
	case []any:
		if len(e) > 0 {
			if f, ok := e[0].(float64); ok {
				c.EOS = int(f)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// HFConfigJSON renders the config as a Hugging Face config.json.
func (c Config) HFConfigJSON() ([]byte, error) {
	modelType := "llama"
	if c.Architecture == ArchQwen2 {
		modelType = "qwen2"
	}
	m := map[string]any{
		"architectures":           []string{c.Architecture},
		"model_type":              modelType,
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"max_position_embeddings": c.MaxPositions,
		"tie_word_embeddings":     c.TieEmbeddings,
		"hidden_act":              "silu",
		"torch_dtype":             "float32",
		"initializer_range":       c.InitStd,
	}
	if c.Architecture == ArchLlama {
		m["attention_bias"] = c.AttentionBias
		m["mlp_bias"] = false
	}
	if c.BOS >= 0 {
		m["bos_token_id"] = c.BOS
	}
	if c.EOS >= 0 {
		m["eos_token_id"] = c.EOS
	}
	if c.PAD >= 0 {
		m["pad_token_id"] = c.PAD
	}
	if c.BuiltinTokenizer != "" {
		m["stx_tokenizer"] = c.BuiltinTokenizer
	}
	return json.MarshalIndent(m, "", "  ")
}
