package tasks

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"stx.dev/stx/schema"
)

// Message is one turn of a chat prompt.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// PromptRenderer turns chat messages into the text the model continues.
// The real one is the model's chat template (its tokenizer_config.json);
// the engine hands it to RenderPrompts. PlainRenderer is the fallback of
// models without a template (the built-in tiny models).
type PromptRenderer interface {
	// Render returns the prompt text of messages; with addGenerationPrompt
	// it ends with the opening of an assistant turn.
	Render(messages []Message, addGenerationPrompt bool) (string, error)
}

// PlainRenderer renders each message as "role: content" on its own line
// and, with addGenerationPrompt, ends with "assistant: ". Datasets render
// their chat prompts with it when they are read, so every example has a
// Prompt (IDs and the validation split are derived from it).
type PlainRenderer struct{}

// Render implements PromptRenderer.
func (PlainRenderer) Render(messages []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	if addGenerationPrompt {
		b.WriteString("assistant: ")
	}
	return b.String(), nil
}

// RenderPrompts re-renders the Prompt of every example that has chat
// Messages with r (the model's chat template) and keeps the others. IDs
// are not changed: they were fixed when the data was read.
func RenderPrompts(exs []Example, r PromptRenderer) error {
	for i := range exs {
		if len(exs[i].Messages) == 0 {
			continue
		}
		p, err := r.Render(exs[i].Messages, true)
		if err != nil {
			return fmt.Errorf("example %q: render chat prompt: %w", exs[i].ID, err)
		}
		exs[i].Prompt = p
	}
	return nil
}

// columns are a dataset's field names with the defaults filled in.
type columns schema.Columns

func newColumns(c schema.Columns) columns {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Prompt, "prompt")
	def(&c.Messages, "messages")
	def(&c.Answer, "answer")
	def(&c.Completion, "completion")
	def(&c.Chosen, "chosen")
	def(&c.Rejected, "rejected")
	def(&c.Label, "label")
	def(&c.ID, "id")
	def(&c.DataSource, "data_source")
	def(&c.Metadata, "metadata")
	return columns(c)
}

// lookup finds a field: the key as written, else a dotted path into nested
// objects ("reward_model.ground_truth").
func lookup(rec map[string]any, key string) (any, bool) {
	if v, ok := rec[key]; ok {
		return v, true
	}
	parts := strings.Split(key, ".")
	if len(parts) == 1 {
		return nil, false
	}
	var cur any = rec
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// parseFields turns one decoded record into an example and its shape. The
// record's values are those of encoding/json with UseNumber, or those of a
// Parquet row (Go integers, floats, []any, map[string]any). source is the
// default data_source.
func parseFields(rec map[string]any, c columns, source string) (Example, shape, error) {
	has := func(k string) bool { _, ok := lookup(rec, k); return ok }
	get := func(k string) any { v, _ := lookup(rec, k); return v }
	// A prompt given as chat messages: in the messages column, or as a
	// list in the prompt column.
	var msgs []Message
	promptIsList := false
	if v, ok := lookup(rec, c.Prompt); ok {
		if _, isList := v.([]any); isList {
			promptIsList = true
		}
	}
	msgCol := ""
	switch {
	case promptIsList:
		msgCol = c.Prompt
	case !has(c.Prompt) && has(c.Messages):
		msgCol = c.Messages
	}
	if msgCol != "" {
		var err error
		if msgs, err = parseMessages(get(msgCol), msgCol); err != nil {
			return Example{}, 0, err
		}
	}
	var s shape
	var lastTurn bool // the completion is the conversation's last assistant turn
	switch {
	case has(c.Chosen) || has(c.Rejected):
		s = shapePreference
		if k := firstOf(rec, c.Answer, c.Completion, c.Label); k != "" {
			return Example{}, 0, fmt.Errorf("record mixes %s/%s with %q", c.Chosen, c.Rejected, k)
		}
	case has(c.Label):
		s = shapeKTO
		if has(c.Answer) {
			return Example{}, 0, fmt.Errorf("record mixes %q with %q (KTO records have %q)", c.Label, c.Answer, c.Completion)
		}
	case has(c.Completion):
		s = shapeSFT
		if has(c.Answer) {
			return Example{}, 0, fmt.Errorf("record has both %q and %q", c.Answer, c.Completion)
		}
	case has(c.Answer):
		s = shapeRL
	case len(msgs) > 1 && msgs[len(msgs)-1].Role == "assistant":
		s, lastTurn = shapeSFT, true
	default:
		return Example{}, 0, fmt.Errorf("record has no %q, %q or %q/%q field", c.Answer, c.Completion, c.Chosen, c.Rejected)
	}
	var ex Example
	var err error
	str := func(k string, dst *string) {
		if err != nil {
			return
		}
		x, ok := lookup(rec, k)
		if !ok {
			err = fmt.Errorf("%s record has no %q field", s, k)
			return
		}
		if *dst, ok = x.(string); !ok {
			err = fmt.Errorf("field %q is a JSON %s, want a string", k, jsonType(x))
		}
	}
	if msgs == nil {
		str(c.Prompt, &ex.Prompt)
	}
	switch {
	case lastTurn:
		ex.Answer = msgs[len(msgs)-1].Content
		msgs = msgs[:len(msgs)-1]
	case s == shapeRL:
		str(c.Answer, &ex.Answer)
	case s == shapeSFT, s == shapeKTO:
		str(c.Completion, &ex.Answer)
	case s == shapePreference:
		str(c.Chosen, &ex.Chosen)
		str(c.Rejected, &ex.Rejected)
	}
	if err != nil {
		return Example{}, 0, err
	}
	if msgs != nil {
		ex.Messages = msgs
		ex.Prompt, _ = PlainRenderer{}.Render(msgs, true)
	} else if ex.Prompt == "" {
		return Example{}, 0, fmt.Errorf("field %q is empty", c.Prompt)
	}
	if s == shapeKTO {
		var ok bool
		if ex.Label, ok = get(c.Label).(bool); !ok {
			return Example{}, 0, fmt.Errorf("field %q is a JSON %s, want a bool", c.Label, jsonType(get(c.Label)))
		}
		ex.HasLabel = true
	}
	if ex.ID, err = parseID(rec, c.ID); err != nil {
		return Example{}, 0, err
	}
	ex.idGiven = ex.ID != ""
	if ex.ID == "" {
		ex.ID = promptID(ex.Prompt)
	}
	// Parquet strings are raw bytes (JSON loaders check theirs before
	// decoding, which would turn bad bytes into U+FFFD): a prompt with
	// invalid UTF-8 would be tokenized as something else.
	for _, f := range []struct{ name, v string }{{c.Prompt, ex.Prompt}, {c.Answer, ex.Answer}, {c.Chosen, ex.Chosen}, {c.Rejected, ex.Rejected}} {
		if !utf8.ValidString(f.v) {
			return Example{}, 0, fmt.Errorf("field %q is not valid UTF-8", f.name)
		}
	}
	ex.DataSource = source
	if v, ok := lookup(rec, c.DataSource); ok {
		if ex.DataSource, ok = v.(string); !ok {
			return Example{}, 0, fmt.Errorf("field %q is a JSON %s, want a string", c.DataSource, jsonType(v))
		}
	}
	if v, ok := lookup(rec, c.Metadata); ok {
		if ex.Metadata, err = json.Marshal(v); err != nil {
			return Example{}, 0, fmt.Errorf("field %q: %w", c.Metadata, err)
		}
	}
	return ex, s, nil
}

// parseID reads the id field: a non-empty string or an integer; "" when
// the record has none.
func parseID(rec map[string]any, key string) (string, error) {
	v, ok := lookup(rec, key)
	if !ok {
		return "", nil
	}
	switch id := v.(type) {
	case nil:
		return "", fmt.Errorf("field %q is null, want a string or an integer", key)
	case string:
		if id == "" {
			return "", fmt.Errorf("field %q is empty", key)
		}
		return id, nil
	case json.Number:
		if _, err := id.Int64(); err != nil {
			return "", fmt.Errorf("field %q is %s, want a string or an integer", key, id)
		}
		return id.String(), nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(id), nil
	case float32, float64:
		f := fmt.Sprint(id)
		x, _ := id.(float64)
		if y, ok := id.(float32); ok {
			x = float64(y)
		}
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return fmt.Sprintf("%.0f", x), nil
		}
		return "", fmt.Errorf("field %q is %s, want a string or an integer", key, f)
	default:
		return "", fmt.Errorf("field %q is a JSON %s, want a string or an integer", key, jsonType(id))
	}
}

// parseMessages reads a chat prompt: a non-empty list of {role, content}.
func parseMessages(v any, key string) ([]Message, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("field %q is a JSON %s, want a list of {role, content} messages", key, jsonType(v))
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("field %q is an empty list of messages", key)
	}
	msgs := make([]Message, len(list))
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("field %q, message %d is a JSON %s, want {role, content}", key, i, jsonType(x))
		}
		role, ok1 := m["role"].(string)
		content, ok2 := m["content"].(string)
		if !ok1 || role == "" {
			return nil, fmt.Errorf("field %q, message %d has no string \"role\"", key, i)
		}
		if !ok2 {
			return nil, fmt.Errorf("field %q, message %d has no string \"content\"", key, i)
		}
		msgs[i] = Message{Role: role, Content: content}
	}
	return msgs, nil
}
