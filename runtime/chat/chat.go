// Package chat renders a model's chat template: the Jinja template of
// tokenizer_config.json ("chat_template") that turns a conversation into the
// prompt text an instruct model was trained on, as Hugging Face's
// apply_chat_template(tokenize=False) does.
//
// Typical use, building a prompt for generation:
//
//	tmpl, err := chat.Load(modelDir)
//	...
//	text, err := tmpl.Render([]chat.Message{{Role: "user", Content: q}}, true)
//	ids := tok.Encode(text) // the template spells BOS etc. itself: add no special tokens
//
// Templates render exactly as transformers' apply_chat_template renders them
// with Python's Jinja2: they run on github.com/ardanlabs/jinja, patched in
// third_party/ardanlabs-jinja (PATCHES.md) to have Jinja2 3.1's semantics
// as transformers configures it (ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, loop controls, the generation tag, tojson
// as json.dumps without key sorting, raise_exception, strftime_now), its
// Undefined (printing or iterating an undefined variable gives nothing;
// arithmetic, attributes and items of one fail), and failing where Jinja2
// fails, with the template's line: a template error is an error, never a
// malformed prompt. scripts/render-chat.py and jinja2_test.go check this
// against Python's Jinja2. Conversations and tools given as JSON keep their
// objects' key order, which tojson prints.
//
// A template is data from a model download: rendering is bounded
// (jinja.DefaultLimits: 256 nested macro calls, 10^7 loop iterations,
// strings and output of 16 MiB, lists of 2^20 items) and fails with an error
// naming the limit it reached, and the files are read with size bounds,
// refusing named pipes and devices.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"

	"stx.dev/stx/internal/plainfile"
	"stx.dev/stx/runtime/tokenizer"
)

// MaxTemplateBytes bounds chat_template.jinja (the largest published chat
// templates are tens of kilobytes); tokenizer_config.json is bounded by
// tokenizer.MaxConfigBytes.
const MaxTemplateBytes = 4 << 20

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // "system", "user", "assistant", "tool", ...
	Content string `json:"content"`
}

// Template is a compiled chat template with the special tokens it may use
// (bos_token, eos_token, unk_token, pad_token). It is safe for concurrent use.
type Template struct {
	// Name is the template's name when tokenizer_config.json lists several
	// ("default" is chosen), else "".
	Name     string
	Source   string
	tmpl     *jinja.Template
	specials map[string]string
	limits   jinja.Limits
}

// Load reads the chat template of the model directory dir: the
// "chat_template" of tokenizer_config.json (a string, or a list of
// {"name", "template"} from which "default" is taken), else the file
// chat_template.jinja; and bos_token, eos_token, unk_token and pad_token
// (strings or AddedToken objects with a "content") from tokenizer_config.json.
// A model without a chat template is an error that says so. Both files are
// read with size bounds (tokenizer.MaxConfigBytes, MaxTemplateBytes), and a
// named pipe or a device in their place is an error.
func Load(dir string) (*Template, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	raw, err := plainfile.ReadFile(path, tokenizer.MaxConfigBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	var cfg map[string]json.RawMessage
	if err == nil {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("chat template: %s: %w", path, err)
		}
	}
	specials := map[string]string{}
	for _, key := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		v, ok := cfg[key]
		if !ok || tokenizer.IsNull(v) {
			continue
		}
		text, err := tokenizer.SpecialTokenText(v)
		if err != nil {
			return nil, fmt.Errorf("chat template: %s: %s %w", path, key, err)
		}
		specials[key] = text
	}
	name, src, err := templateSource(cfg["chat_template"])
	if err != nil {
		return nil, fmt.Errorf("chat template: %s: chat_template: %w", path, err)
	}
	if src == "" {
		jpath := filepath.Join(dir, "chat_template.jinja")
		b, err := plainfile.ReadFile(jpath, MaxTemplateBytes)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("chat template: model %s has none (no chat_template in tokenizer_config.json, no chat_template.jinja)", dir)
		}
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		src = string(b)
	}
	t, err := Parse(src, specials)
	if err != nil {
		return nil, fmt.Errorf("chat template of %s: %w", dir, err)
	}
	t.Name = name
	return t, nil
}

// Has says whether the model directory dir has a chat template for Load: a
// chat_template in tokenizer_config.json or a chat_template.jinja file. It
// does not check that the template is usable: a file that Load cannot read
// (too large, not a regular file) counts as there, so that Load reports it.
func Has(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return true
	}
	raw, err := plainfile.ReadFile(filepath.Join(dir, "tokenizer_config.json"), tokenizer.MaxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	var cfg struct {
		Template json.RawMessage `json:"chat_template"`
	}
	// A malformed file counts as having a template, so that Load reports it.
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return true
	}
	return !tokenizer.IsNull(cfg.Template)
}

// Parse compiles a chat template. specials maps variables such as
// "bos_token" to their text.
func Parse(src string, specials map[string]string) (t *Template, err error) {
	defer recoverError(&err)
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	return &Template{Source: src, tmpl: tmpl, specials: specials, limits: jinja.DefaultLimits}, nil
}

// Render renders messages, ending with the assistant turn's header when
// addGenerationPrompt is set (the prompt for a model's reply).
func (t *Template) Render(messages []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderWith(messages, addGenerationPrompt, nil)
}

// RenderWith is Render with extra template variables, e.g. "tools" (a list of
// tool schemas) or "enable_thinking" (Qwen3). messages is a []Message, or any
// JSON-like value (slices, maps, strings, numbers, bools, nil) for richer
// turns (tool_calls, reasoning_content, content parts); a json.RawMessage
// anywhere in messages or vars is decoded keeping its objects' key order,
// which tojson then prints. Map keys are otherwise sorted. As in Hugging
// Face's apply_chat_template, tools and documents are none unless given.
// What Jinja2 raises is returned as an error with the template's line
// (raise_exception's message, an undefined variable used in arithmetic,
// iterating none, ...), and so is a rendering that reaches a limit.
func (t *Template) RenderWith(messages any, addGenerationPrompt bool, vars map[string]any) (_ string, err error) {
	defer recoverError(&err)
	msgs, err := toValue(messages)
	if err != nil {
		return "", fmt.Errorf("chat template: messages: %w", err)
	}
	data := map[string]jinja.Value{
		"messages":              msgs,
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
	}
	for k, v := range t.specials {
		data[k] = jinja.NewString(v)
	}
	for k, v := range vars {
		if data[k], err = toValue(v); err != nil {
			return "", fmt.Errorf("chat template: variable %s: %w", k, err)
		}
	}
	out, err := t.tmpl.RenderLimits(data, t.limits)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// recoverError turns a panic of the template engine into an error: a model's
// template is input, and no input may crash stx.
func recoverError(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("chat template: the template engine failed: %v", r)
	}
}

// templateSource reads tokenizer_config.json's chat_template: a string, or a
// list of named templates from which "default" is taken.
func templateSource(raw json.RawMessage) (name, src string, err error) {
	if tokenizer.IsNull(raw) {
		return "", "", nil
	}
	if err := json.Unmarshal(raw, &src); err == nil {
		return "", src, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", "", fmt.Errorf("neither a string nor a list of {name, template}")
	}
	var names []string
	for _, n := range named {
		if n.Name == "default" {
			return n.Name, n.Template, nil
		}
		names = append(names, n.Name)
	}
	return "", "", fmt.Errorf("no template named \"default\" among %s", strings.Join(names, ", "))
}

// toValue converts a JSON-like Go value to a template value.
func toValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return x, nil
	case json.RawMessage:
		return jsonValue(x)
	case []Message:
		items := make([]jinja.Value, len(x))
		for i, m := range x {
			d := jinja.NewDict()
			d.AsDict().Set("role", jinja.NewString(m.Role))
			d.AsDict().Set("content", jinja.NewString(m.Content))
			items[i] = d
		}
		return jinja.NewList(items), nil
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			var err error
			if items[i], err = toValue(e); err != nil {
				return jinja.Value{}, err
			}
		}
		return jinja.NewList(items), nil
	case map[string]any:
		d := jinja.NewDict()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e, err := toValue(x[k])
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, e)
		}
		return d, nil
	}
	return jinja.Value{}, fmt.Errorf("a %T cannot be a template value", v)
}

// jsonValue decodes JSON into a template value, keeping object key order.
func jsonValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if dec.More() {
		return jinja.Value{}, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(kt.(string), v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := x.Float64()
		return jinja.NewFloat(f), err
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}
