package runtime

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"stx.dev/stx/runtime/safetensors"
)

// modelShapes are the config.json files of published checkpoints (the fields this package
// reads, as the model hubs serve them), by name: `stx init-model --shape` writes a randomly
// initialised model of that size, to measure speed and memory at real scale without
// downloading weights.
var modelShapes = map[string]string{
	"llama2-7b": `{"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": true, "vocab_size": 32000}`,
	"llama3.2-1b": `{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 128256}`,
	"mistral-7b-v0.1": `{"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000}`,
	"qwen2.5-0.5b": `{"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}`,
	"qwen3-0.6b": `{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936}`,
}

// ModelShapeNames lists the names of ModelShape, sorted.
func ModelShapeNames() []string { return slices.Sorted(maps.Keys(modelShapes)) }

// ModelShape returns the config.json of a published checkpoint and its Config.
func ModelShape(name string) (Config, []byte, error) {
	js, ok := modelShapes[name]
	if !ok {
		return Config{}, nil, fmt.Errorf("unknown model shape %q (known: %s)", name, strings.Join(ModelShapeNames(), ", "))
	}
	c, err := ParseHFConfig([]byte(js))
	if err != nil {
		return Config{}, nil, fmt.Errorf("model shape %s: %w", name, err)
	}
	return c, []byte(js), nil
}

// InitHF returns a model of a config.json's architecture and sizes with weights initialised
// from seed (normal with the config's initializer_range; norms 1, biases 0). SaveHF writes
// the weights as dtype and keeps the config's other fields (token ids, generation settings).
func InitHF(configJSON []byte, seed uint64, dtype safetensors.DType) (*Model, error) {
	c, err := ParseHFConfig(configJSON)
	if err == nil {
		err = c.CheckMachineMemory()
	}
	if err != nil {
		return nil, err
	}
	if _, ok := torchDTypes[dtype]; !ok {
		return nil, fmt.Errorf("init model: dtype %q is not one of F32, BF16, F16, F64", dtype)
	}
	m, err := NewModel(c, seed)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(configJSON, &m.sourceConfig); err != nil {
		return nil, fmt.Errorf("init model: %w", err)
	}
	m.dtypes = map[string]safetensors.DType{}
	for _, p := range m.params {
		m.dtypes[p.Name] = dtype
	}
	return m, nil
}
