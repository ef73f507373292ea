package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tokenizersDir is where scripts/fetch-tokenizers.sh writes the real
// tokenizer configs and goldens: $STX_TOKENIZERS_DIR, else testdata/tokenizers
// at the repository root.
func tokenizersDir() string {
	if d := os.Getenv("STX_TOKENIZERS_DIR"); d != "" {
		return d
	}
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

// TestConformance renders the real Qwen3, Llama 3.1 and Gemma 3 chat
// templates (and, for Llama 2, whose package has none, the [INST]-layout
// template the golden script supplies) and compares with Hugging Face's
// JavaScript Jinja (@huggingface/jinja), including the conversations a
// template refuses.
func TestConformance(t *testing.T) {
	root := tokenizersDir()
	for _, name := range []string{"qwen3", "llama3_1", "gemma3", "llama2", "deepseek_v3", "gptoss", "gpt4o"} {
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
				Template string `json:"chat_template"` // set when the model has none
				Chat     []struct {
					Messages json.RawMessage            `json:"messages"`
					AddGen   bool                       `json:"add_generation_prompt"`
					Extra    map[string]json.RawMessage `json:"extra"`
					Prompt   *string                    `json:"prompt"`
					Error    *string                    `json:"error"`
				} `json:"chat"`
			}
			if err := json.Unmarshal(raw, &golden); err != nil {
				t.Fatal(err)
			}
			if golden.Template != "" {
				dir = withTemplate(t, dir, golden.Template)
			}
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			refused := 0
			for i, c := range golden.Chat {
				vars := map[string]any{}
				for k, v := range c.Extra {
					vars[k] = v
				}
				got, err := tmpl.RenderWith(c.Messages, c.AddGen, vars)
				switch {
				case c.Error != nil:
					refused++
					if err == nil || !strings.Contains(err.Error(), *c.Error) {
						t.Errorf("case %d: error %v, want one containing %q", i, err, *c.Error)
					}
				case err != nil:
					t.Errorf("case %d: %v", i, err)
				case got != *c.Prompt:
					t.Errorf("case %d (%s, add_generation_prompt %v, %v):\n got %q\nwant %q", i, c.Messages, c.AddGen, c.Extra, got, *c.Prompt)
				}
			}
			if len(golden.Chat) == 0 {
				t.Fatal("no chat cases in the golden")
			}
			t.Logf("%s: %d renderings checked (%d refused by the template)", name, len(golden.Chat), refused)
		})
	}
}

// withTemplate copies dir's tokenizer_config.json to a new directory with
// chat_template set to src.
func withTemplate(t *testing.T, dir, src string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = src
	out := t.TempDir()
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(out, "tokenizer_config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// features exercises what real chat templates use beyond the ones above:
// raise_exception, namespace(), loop controls, string methods, tojson,
// slicing, `is defined`, bos_token and the generation prompt.
const features = `{%- if messages[0].role == 'system' -%}
{%- set system = messages[0].content | trim -%}{%- set rest = messages[1:] -%}
{%- else -%}{%- set rest = messages -%}{%- endif -%}
{%- set ns = namespace(n=0) -%}
{{ bos_token }}
{%- for m in rest -%}
{%- if m.role == 'skip' -%}{%- continue -%}{%- endif -%}
{%- if m.role == 'stop' -%}{%- break -%}{%- endif -%}
{%- if m.role not in ['user', 'assistant'] -%}{{ raise_exception('bad role ' + m.role) }}{%- endif -%}
{%- set ns.n = ns.n + 1 -%}
[{{ m.role.upper() }}{% if loop.first and system is defined %} ({{ system }}){% endif %}] {{ m.content.strip() }}
{% endfor -%}
{%- if tools is not none %}TOOLS {{ tools | tojson }}
{% endif -%}
{%- if add_generation_prompt %}[ASSISTANT]{% endif %} n={{ ns.n }}`

func TestFeatures(t *testing.T) {
	dir := t.TempDir()
	cfg := map[string]any{
		"chat_template": []map[string]string{{"name": "tool_use", "template": "x"}, {"name": "default", "template": features}},
		"bos_token":     map[string]any{"__type": "AddedToken", "content": "<s>"},
		"eos_token":     "</s>",
	}
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Name != "default" {
		t.Errorf("Name = %q", tmpl.Name)
	}
	msgs := []Message{{"system", "  Be brief. "}, {"user", " hi "}, {"skip", "x"}, {"assistant", "hello\n"}, {"stop", ""}, {"user", "never"}}
	got, err := tmpl.Render(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<s>[USER (Be brief.)] hi\n[ASSISTANT] hello\n[ASSISTANT] n=2"
	if got != want {
		t.Errorf("Render:\n got %q\nwant %q", got, want)
	}
	tools := json.RawMessage(`[{"name": "f", "args": {"z": 1, "a": [true, null, 2.5]}}]`)
	got, err = tmpl.RenderWith([]Message{{"user", "q"}}, false, map[string]any{"tools": tools})
	if err != nil {
		t.Fatal(err)
	}
	want = "<s>[USER] q\nTOOLS [{\"name\": \"f\", \"args\": {\"z\": 1, \"a\": [true, null, 2.5]}}]\n n=1"
	if got != want {
		t.Errorf("RenderWith tools:\n got %q\nwant %q", got, want)
	}
	if _, err := tmpl.Render([]Message{{"robot", "x"}}, false); err == nil || !strings.Contains(err.Error(), "bad role robot") {
		t.Errorf("raise_exception: err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct{ name, config, want string }{
		{"none", `{"bos_token": "<s>"}`, "has none"},
		{"no default", `{"chat_template": [{"name": "rag", "template": "x"}]}`, `no template named "default" among rag`},
		{"bad type", `{"chat_template": 3}`, "neither a string nor a list"},
		{"bad token", `{"chat_template": "x", "eos_token": 3}`, "eos_token is neither a string nor an object"},
		{"syntax", `{"chat_template": "{% for m in messages %}"}`, "parsing"},
		{"json", `{"chat_template": `, "tokenizer_config.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load error = %v, want one containing %q", err, c.want)
			}
		})
	}
	// chat_template.jinja, the newer place for the template.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ messages[0].content }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.Render([]Message{{"user", "hey"}}, false); err != nil || got != "hey" {
		t.Errorf("chat_template.jinja: %q, %v", got, err)
	}
}
