package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"stx.dev/stx/internal/plainfile"
)

// Architectures understood by the loader (the "architectures" field of a Hugging Face
// config.json), each with its "model_type".
const (
	ArchLlama   = "LlamaForCausalLM"   // Llama 2 and 3.x
	ArchMistral = "MistralForCausalLM" // Llama with an optional sliding attention window
	ArchQwen2   = "Qwen2ForCausalLM"   // Qwen2 and Qwen2.5: q/k/v biases
	ArchQwen3   = "Qwen3ForCausalLM"   // Qwen3 dense: per-head RMSNorm of queries and keys
)

// modelTypes maps each supported "model_type" to its architecture.
var modelTypes = map[string]string{"llama": ArchLlama, "mistral": ArchMistral, "qwen2": ArchQwen2, "qwen3": ArchQwen3}

// supportedModels lists the supported model_type/architecture pairs, for error messages.
const supportedModels = "llama (LlamaForCausalLM), mistral (MistralForCausalLM), qwen2 (Qwen2ForCausalLM), qwen3 (Qwen3ForCausalLM)"

// modelType returns the "model_type" of an architecture.
func modelType(arch string) string {
	for t, a := range modelTypes {
		if a == arch {
			return t
		}
	}
	return ""
}

// RopeScaling is a config's "rope_scaling": a change of the RoPE frequencies for contexts
// longer than the model was pre-trained with. Type "" is plain RoPE.
type RopeScaling struct {
	Type string // "", "linear" or "llama3"
	// Factor divides the frequencies (linear: all of them; llama3: the low ones).
	Factor float64
	// Llama 3.1's frequency bands: wavelengths below OriginalMaxPositions/HighFreqFactor keep
	// their frequency, those above OriginalMaxPositions/LowFreqFactor are divided by Factor,
	// and those in between are interpolated.
	LowFreqFactor, HighFreqFactor float64
	OriginalMaxPositions          int
}

// Config describes one decoder of the Llama/Mistral/Qwen family: token embedding, RMSNorm,
// RoPE (rotate-half), grouped-query attention, SwiGLU MLP, optional attention biases, optional
// per-head query/key RMSNorm (Qwen3), optional sliding attention window (Mistral) and tied
// embeddings.
type Config struct {
	Architecture     string      // ArchLlama, ArchMistral, ArchQwen2 or ArchQwen3
	VocabSize        int         // rows of the embedding and of lm_head
	Hidden           int         // model width
	Layers           int         // decoder blocks
	Heads            int         // query heads
	KVHeads          int         // key/value heads (divides Heads)
	Intermediate     int         // SwiGLU width
	HeadDimension    int         // per-head width when it is not Hidden/Heads ("head_dim"); 0: Hidden/Heads
	RMSNormEps       float64     // epsilon inside RMSNorm
	RopeTheta        float64     // RoPE base
	RopeScaling      RopeScaling // frequency scaling ("rope_scaling"); zero value: none
	MaxPositions     int         // longest sequence the model is used with
	SlidingWindow    int         // each query attends to at most this many keys, itself included; 0: all
	TieEmbeddings    bool        // lm_head shares model.embed_tokens.weight
	AttentionBias    bool        // q/k/v projections have biases (always for Qwen2)
	OutputBias       bool        // o_proj has a bias (Llama and Qwen3 with attention_bias)
	QKNorm           bool        // RMSNorm of each query and key head before RoPE (Qwen3)
	BOS, EOS, PAD    int         // special token ids (-1 if none)
	InitStd          float64     // std of the normal initialisation of matrices
	HasValueHead     bool        // adds a scalar head ("score.weight", [1, Hidden]) for value/reward roles
	BuiltinTokenizer string      // "byte" for the built-in configs; "" for checkpoints
}

// HeadDim is the per-head width.
func (c Config) HeadDim() int {
	if c.HeadDimension > 0 {
		return c.HeadDimension
	}
	return c.Hidden / c.Heads
}

// QDim is the width of all query heads together (the attention's inner width).
func (c Config) QDim() int { return c.Heads * c.HeadDim() }

// Size limits of a config. They are far above any published dense decoder of this family
// (e.g. Llama 3.1 405B: 126 layers, hidden 16384, 128 heads, intermediate 53248, vocab 128256)
// and keep every size computation of this package well inside an int.
const (
	maxLayers       = 1024
	maxHidden       = 1 << 16
	maxHeads        = 1024
	maxHeadDim      = 1024
	maxVocab        = 1 << 22
	maxIntermediate = 1 << 20
	maxPositions    = 1 << 24
)

// Validate checks the config's internal consistency and its sizes against the package limits.
func (c Config) Validate() error {
	if modelType(c.Architecture) == "" {
		return fmt.Errorf("model config: unsupported architecture %q (supported: %s)", c.Architecture, supportedModels)
	}
	for _, s := range []struct {
		name   string
		v, max int
	}{{"vocab_size", c.VocabSize, maxVocab}, {"hidden_size", c.Hidden, maxHidden}, {"num_hidden_layers", c.Layers, maxLayers},
		{"num_attention_heads", c.Heads, maxHeads}, {"num_key_value_heads", c.KVHeads, maxHeads},
		{"intermediate_size", c.Intermediate, maxIntermediate}} {
		if s.v <= 0 || s.v > s.max {
			return fmt.Errorf("model config: %s %d out of range [1, %d]", s.name, s.v, s.max)
		}
	}
	switch {
	case c.HeadDimension < 0 || c.HeadDimension > maxHeadDim:
		return fmt.Errorf("model config: head_dim %d out of range [1, %d]", c.HeadDimension, maxHeadDim)
	case c.HeadDimension == 0 && c.Hidden%c.Heads != 0:
		return fmt.Errorf("model config: hidden size %d is not a multiple of %d heads", c.Hidden, c.Heads)
	case c.HeadDim() > maxHeadDim:
		return fmt.Errorf("model config: head dimension %d exceeds %d", c.HeadDim(), maxHeadDim)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: %d attention heads is not a multiple of %d key/value heads", c.Heads, c.KVHeads)
	case c.Architecture == ArchQwen2 && !c.AttentionBias:
		return fmt.Errorf("model config: %s always has q/k/v biases", ArchQwen2)
	case c.Architecture == ArchMistral && (c.AttentionBias || c.OutputBias):
		return fmt.Errorf("model config: %s has no attention biases", ArchMistral)
	case c.QKNorm != (c.Architecture == ArchQwen3):
		return fmt.Errorf("model config: query/key norms go with %s only", ArchQwen3)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model config: head dimension %d must be even for RoPE", c.HeadDim())
	case !(c.RMSNormEps > 0) || !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0):
		return fmt.Errorf("model config: rms_norm_eps (%g) and rope_theta (%g) must be positive", c.RMSNormEps, c.RopeTheta)
	case c.MaxPositions <= 0:
		// Without it no length check before sampling or scoring could catch a
		// sequence the model was never meant to see.
		return fmt.Errorf("model config: max_position_embeddings is missing or not positive (%d): the model's longest sequence must be known", c.MaxPositions)
	case c.MaxPositions > maxPositions:
		return fmt.Errorf("model config: max_position_embeddings %d out of range [1, %d]", c.MaxPositions, maxPositions)
	case c.SlidingWindow < 0:
		return fmt.Errorf("model config: negative sliding_window %d", c.SlidingWindow)
	}
	// Special ids index the embedding and the logits: one outside the
	// vocabulary would be read out of bounds (or never sampled).
	for _, s := range []struct {
		name string
		id   int
	}{{"bos_token_id", c.BOS}, {"eos_token_id", c.EOS}, {"pad_token_id", c.PAD}} {
		if s.id < -1 || s.id >= c.VocabSize {
			return fmt.Errorf("model config: %s %d is outside the vocabulary (vocab_size %d)", s.name, s.id, c.VocabSize)
		}
	}
	return c.RopeScaling.validate()
}

func (r RopeScaling) validate() error {
	switch r.Type {
	case "":
		return nil
	case "linear":
		if !(r.Factor >= 1) || math.IsInf(r.Factor, 0) {
			return fmt.Errorf("model config: rope_scaling linear needs a factor ≥ 1, got %g", r.Factor)
		}
	case "llama3":
		if !(r.Factor >= 1) || math.IsInf(r.Factor, 0) || !(r.LowFreqFactor > 0) || !(r.HighFreqFactor > r.LowFreqFactor) ||
			math.IsInf(r.HighFreqFactor, 0) || r.OriginalMaxPositions <= 0 || r.OriginalMaxPositions > maxPositions {
			return fmt.Errorf("model config: rope_scaling llama3 needs factor ≥ 1, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings in [1, %d] (got %g, %g, %g, %d)",
				maxPositions, r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPositions)
		}
	default:
		return fmt.Errorf("model config: rope_scaling type %q is not supported (supported: linear, llama3)", r.Type)
	}
	return nil
}

// RopeInvFreq returns the RoPE rotation frequency of each of the headDim/2 pairs of a head:
// θ^(−2i/headDim), changed by the config's rope_scaling.
func (c Config) RopeInvFreq() []float64 {
	hd := c.HeadDim()
	inv := make([]float64, hd/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(hd))
	}
	r := c.RopeScaling
	switch r.Type {
	case "linear":
		for i := range inv {
			inv[i] /= r.Factor
		}
	case "llama3":
		orig := float64(r.OriginalMaxPositions)
		lowWavelen, highWavelen := orig/r.LowFreqFactor, orig/r.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen: // high frequencies: unchanged
			case wavelen > lowWavelen:
				inv[i] = f / r.Factor
			default:
				smooth := (orig/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				inv[i] = (1-smooth)*f/r.Factor + smooth*f
			}
		}
	}
	return inv
}

// NumParams counts the model's parameters.
func (c Config) NumParams() int {
	d, kv, q := c.Hidden, c.KVHeads*c.HeadDim(), c.QDim()
	perLayer := 2*d + d*q + 2*d*kv + q*d + 3*d*c.Intermediate
	if c.AttentionBias {
		perLayer += q + 2*kv
	}
	if c.OutputBias {
		perLayer += d
	}
	if c.QKNorm {
		perLayer += 2 * c.HeadDim()
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

// hfConfig is the subset of a Hugging Face config.json that this model family uses, plus the
// fields of features it does not implement, so that those are refused rather than ignored.
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
	MaxPositionEmbeddings *int     `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool    `json:"tie_word_embeddings"`
	AttentionBias         *bool    `json:"attention_bias,omitempty"`
	HiddenAct             string   `json:"hidden_act"`
	BOSTokenID            any      `json:"bos_token_id,omitempty"`
	EOSTokenID            any      `json:"eos_token_id,omitempty"`
	PADTokenID            any      `json:"pad_token_id,omitempty"`
	TorchDType            string   `json:"torch_dtype,omitempty"`
	RopeScaling           any      `json:"rope_scaling,omitempty"`
	RopeParameters        any      `json:"rope_parameters,omitempty"` // transformers v5's rope_theta + rope_scaling
	HeadDim               *int     `json:"head_dim,omitempty"`
	InitializerRange      float64  `json:"initializer_range,omitempty"`
	StxTokenizer          string   `json:"stx_tokenizer,omitempty"`
	UseSlidingWindow      bool     `json:"use_sliding_window,omitempty"`
	SlidingWindow         *int     `json:"sliding_window,omitempty"`
	LayerTypes            []string `json:"layer_types,omitempty"`
	MLPBias               bool     `json:"mlp_bias,omitempty"`
	PartialRotaryFactor   *float64 `json:"partial_rotary_factor,omitempty"`
	// Mixture-of-experts fields (Qwen2/3-MoE, Mixtral, DeepSeek): dense models only here.
	NumExperts      *int `json:"num_experts,omitempty"`
	NumLocalExperts *int `json:"num_local_experts,omitempty"`
	NRoutedExperts  *int `json:"n_routed_experts,omitempty"`
}

// maxConfigFile bounds a model's config.json (real ones are a few KB).
const maxConfigFile = 64 << 20

// ReadHFConfig reads dir/config.json and maps it to a Config of a model that fits this
// machine's memory.
func ReadHFConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	// Bounded, and never a FIFO or a device: a model directory is a download.
	data, err := plainfile.ReadFile(path, maxConfigFile)
	if err != nil {
		return Config{}, fmt.Errorf("reading model config: %w", err)
	}
	cfg, err := ParseHFConfig(data)
	if err == nil {
		err = cfg.CheckMachineMemory()
	}
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// tokenID reads a special token id: a number, or the first of a list of numbers; -1 if none.
func tokenID(v any) int {
	switch e := v.(type) {
	case float64:
		return specialID(e)
	case []any:
		if len(e) > 0 {
			if f, ok := e[0].(float64); ok {
				return specialID(f)
			}
		}
	}
	return -1
}

// specialID maps a config's special token id to an int: a negative one
// (pad_token_id -1 in some converted configs) means none; a fraction or a
// value beyond int32 is returned as one Validate refuses.
func specialID(f float64) int {
	switch {
	case f < 0:
		return -1
	case f != math.Trunc(f) || f > math.MaxInt32:
		return math.MaxInt32
	}
	return int(f)
}

// ParseHFConfig maps the contents of a Hugging Face config.json to a Config. Architectures
// and options this package does not implement are refused with an error naming them, and the
// sizes are checked against the package limits. It reads nothing of the machine: whether the
// model fits this machine's memory is checked where a model is read or built (ReadHFConfig,
// InitHF: CheckMachineMemory).
func ParseHFConfig(data []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, fmt.Errorf("parsing config.json: %w", err)
	}
	arch := ""
	if len(h.Architectures) > 0 {
		arch = h.Architectures[0]
		if modelType(arch) == "" {
			return Config{}, fmt.Errorf("unsupported architecture %q (supported: %s)", arch, supportedModels)
		}
	}
	switch want, ok := modelTypes[h.ModelType]; {
	case h.ModelType == "" && arch == "":
		return Config{}, fmt.Errorf("config.json has neither \"architectures\" nor \"model_type\" (supported: %s)", supportedModels)
	case h.ModelType != "" && !ok:
		return Config{}, fmt.Errorf("unsupported model_type %q (supported: %s)", h.ModelType, supportedModels)
	case arch == "":
		arch = want
	case h.ModelType != "" && want != arch:
		return Config{}, fmt.Errorf("model_type %q does not match architecture %q (supported: %s)", h.ModelType, arch, supportedModels)
	}
	switch {
	case h.HiddenAct != "" && h.HiddenAct != "silu":
		return Config{}, fmt.Errorf("unsupported hidden_act %q (want silu)", h.HiddenAct)
	case h.UseSlidingWindow:
		return Config{}, fmt.Errorf("use_sliding_window is not supported for %s (only full attention)", arch)
	case h.MLPBias:
		return Config{}, fmt.Errorf("mlp_bias is not supported")
	case h.PartialRotaryFactor != nil && *h.PartialRotaryFactor != 1:
		return Config{}, fmt.Errorf("partial_rotary_factor %g is not supported (RoPE over whole heads only)", *h.PartialRotaryFactor)
	case h.NumExperts != nil && *h.NumExperts > 0, h.NumLocalExperts != nil && *h.NumLocalExperts > 0,
		h.NRoutedExperts != nil && *h.NRoutedExperts > 0:
		return Config{}, fmt.Errorf("mixture-of-experts models are not supported (dense models only: %s)", supportedModels)
	case h.MaxPositionEmbeddings == nil || *h.MaxPositionEmbeddings <= 0:
		return Config{}, fmt.Errorf("max_position_embeddings is missing or not positive: the model's longest sequence must be known")
	}
	for _, t := range h.LayerTypes {
		if t != "full_attention" {
			return Config{}, fmt.Errorf("layer_types %q is not supported (only full_attention)", t)
		}
	}
	c := Config{
		Architecture: arch, VocabSize: h.VocabSize, Hidden: h.HiddenSize, Layers: h.NumHiddenLayers,
		Heads: h.NumAttentionHeads, KVHeads: h.NumAttentionHeads, Intermediate: h.IntermediateSize,
		RMSNormEps: h.RMSNormEps, RopeTheta: h.RopeTheta, MaxPositions: *h.MaxPositionEmbeddings,
		AttentionBias: arch == ArchQwen2, QKNorm: arch == ArchQwen3,
		BOS: tokenID(h.BOSTokenID), EOS: tokenID(h.EOSTokenID), PAD: tokenID(h.PADTokenID),
		InitStd: h.InitializerRange, BuiltinTokenizer: h.StxTokenizer,
	}
	// The config classes of these four architectures default to untied embeddings.
	if h.TieWordEmbeddings != nil {
		c.TieEmbeddings = *h.TieWordEmbeddings
	}
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if h.AttentionBias != nil {
		switch arch {
		case ArchLlama, ArchQwen3: // one switch for q, k, v and o
			c.AttentionBias, c.OutputBias = *h.AttentionBias, *h.AttentionBias
		case ArchMistral:
			if *h.AttentionBias {
				return Config{}, fmt.Errorf("attention_bias is not supported for %s", arch)
			}
		}
	}
	if arch == ArchMistral && h.SlidingWindow != nil && *h.SlidingWindow > 0 {
		// Mistral applies its sliding_window in every layer; Qwen's needs use_sliding_window,
		// refused above, and Llama has none.
		c.SlidingWindow = *h.SlidingWindow
	}
	rope := h.RopeScaling
	if h.RopeParameters != nil {
		if h.RopeScaling != nil {
			return Config{}, fmt.Errorf("config.json has both rope_scaling and rope_parameters")
		}
		rope = h.RopeParameters
	}
	if rope != nil {
		rs, theta, err := parseRopeScaling(rope)
		if err != nil {
			return Config{}, err
		}
		c.RopeScaling = rs
		if theta > 0 {
			c.RopeTheta = theta
		}
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
	if h.HeadDim != nil {
		if *h.HeadDim <= 0 {
			return Config{}, fmt.Errorf("head_dim %d must be positive", *h.HeadDim)
		}
		if c.Heads <= 0 || c.Hidden%c.Heads != 0 || *h.HeadDim != c.Hidden/c.Heads {
			c.HeadDimension = *h.HeadDim
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// parseRopeScaling reads a rope_scaling (or transformers v5 rope_parameters) object: its type
// under "rope_type" or the older "type", and rope_theta where rope_parameters carries it.
func parseRopeScaling(v any) (RopeScaling, float64, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return RopeScaling{}, 0, fmt.Errorf("rope_scaling must be an object, got %v", v)
	}
	num := func(key string) float64 {
		f, _ := m[key].(float64)
		return f
	}
	typ, _ := m["rope_type"].(string)
	if typ == "" {
		typ, _ = m["type"].(string)
	}
	var r RopeScaling
	switch typ {
	case "", "default":
	case "linear", "llama3":
		r = RopeScaling{Type: typ, Factor: num("factor"), LowFreqFactor: num("low_freq_factor"),
			HighFreqFactor: num("high_freq_factor"), OriginalMaxPositions: int(num("original_max_position_embeddings"))}
	default:
		return RopeScaling{}, 0, fmt.Errorf("rope_scaling type %q is not supported (supported: linear, llama3)", typ)
	}
	if f, ok := m["partial_rotary_factor"].(float64); ok && f != 1 {
		return RopeScaling{}, 0, fmt.Errorf("partial_rotary_factor %g is not supported (RoPE over whole heads only)", f)
	}
	if err := r.validate(); err != nil {
		return RopeScaling{}, 0, err
	}
	return r, num("rope_theta"), nil
}

// HFConfigJSON renders the config as a Hugging Face config.json.
func (c Config) HFConfigJSON() ([]byte, error) {
	m := map[string]any{
		"architectures":           []string{c.Architecture},
		"model_type":              modelType(c.Architecture),
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim(),
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"rope_scaling":            nil,
		"max_position_embeddings": c.MaxPositions,
		"tie_word_embeddings":     c.TieEmbeddings,
		"hidden_act":              "silu",
		"torch_dtype":             "float32",
		"initializer_range":       c.InitStd,
	}
	switch c.Architecture {
	case ArchLlama, ArchQwen3:
		m["attention_bias"] = c.AttentionBias
		m["mlp_bias"] = false
	case ArchMistral:
		m["sliding_window"] = nil
		if c.SlidingWindow > 0 {
			m["sliding_window"] = c.SlidingWindow
		}
	case ArchQwen2:
		m["use_sliding_window"] = false
	}
	switch r := c.RopeScaling; r.Type {
	case "linear":
		m["rope_scaling"] = map[string]any{"rope_type": r.Type, "factor": r.Factor}
	case "llama3":
		m["rope_scaling"] = map[string]any{"rope_type": r.Type, "factor": r.Factor, "low_freq_factor": r.LowFreqFactor,
			"high_freq_factor": r.HighFreqFactor, "original_max_position_embeddings": r.OriginalMaxPositions}
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
