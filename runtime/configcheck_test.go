package runtime

import (
	"strings"
	"testing"
)

// TestMaxPositionsRequired: a config.json without max_position_embeddings,
// or with one ≤ 0, is refused when it is read, before any weight is.
func TestMaxPositionsRequired(t *testing.T) {
	base := `{"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16,
		"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2%s}`
	if _, err := ParseHFConfig([]byte(strings.Replace(base, "%s", `, "max_position_embeddings": 64`, 1))); err != nil {
		t.Fatal(err)
	}
	for _, extra := range []string{"", `, "max_position_embeddings": 0`, `, "max_position_embeddings": -5`} {
		_, err := ParseHFConfig([]byte(strings.Replace(base, "%s", extra, 1)))
		if err == nil || !strings.Contains(err.Error(), "max_position_embeddings is missing or not positive") {
			t.Errorf("config with %q: %v", extra, err)
		}
	}
	for _, name := range BuiltinConfigNames() {
		c, _ := BuiltinConfig(name)
		if err := c.Validate(); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}
