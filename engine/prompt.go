package engine

import (
	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/runtime/tokenizer"
)

// promptRenderer is how the rollout model turns a dataset's chat messages
// into its prompt text. This is where a model's chat template plugs in: a
// tokenizer that implements tasks.PromptRenderer (a Hugging Face model's
// tokenizer_config.json chat_template) renders the messages itself; the
// others (the built-in byte-level models, which were never trained on a
// chat format) get tasks.PlainRenderer's "role: content" lines.
func promptRenderer(tok tokenizer.Tokenizer) tasks.PromptRenderer {
	if r, ok := tok.(tasks.PromptRenderer); ok {
		return r
	}
	return tasks.PlainRenderer{}
}
