package engine

import (
	"fmt"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/engine/workflow"
	"stx.dev/stx/runtime/chat"
	"stx.dev/stx/runtime/tokenizer"
)

// promptRenderer is how the rollout model turns a dataset's chat messages
// into its prompt text. A Hugging Face model directory with a chat template
// (tokenizer_config.json "chat_template" or chat_template.jinja) renders the
// messages with it, as apply_chat_template does; a tokenizer that implements
// tasks.PromptRenderer itself renders them; the others (the built-in
// byte-level models, which were never trained on a chat format) get
// tasks.PlainRenderer's "role: content" lines.
func promptRenderer(tok tokenizer.Tokenizer, modelDir string) (tasks.PromptRenderer, error) {
	if modelDir != "" && chat.Has(modelDir) {
		t, err := chat.Load(modelDir)
		if err != nil {
			return nil, fmt.Errorf("chat template of %s: %w", modelDir, err)
		}
		return templateRenderer{t}, nil
	}
	if r, ok := tok.(tasks.PromptRenderer); ok {
		return r, nil
	}
	return tasks.PlainRenderer{}, nil
}

// templateRenderer adapts a model's chat template to tasks.PromptRenderer.
type templateRenderer struct{ t *chat.Template }

func (r templateRenderer) Render(messages []tasks.Message, addGenerationPrompt bool) (string, error) {
	m := make([]chat.Message, len(messages))
	for i, msg := range messages {
		m[i] = chat.Message{Role: msg.Role, Content: msg.Content}
	}
	return r.t.Render(m, addGenerationPrompt)
}

// workflowRenderer renders a multi-turn episode's conversation (observations
// as user turns, actions as assistant turns) with the chat template, ending
// with the opening of the next assistant turn.
func (r templateRenderer) workflowRenderer() workflow.Renderer {
	return workflow.RendererFunc(func(msgs []workflow.Message) (string, error) {
		m := make([]chat.Message, len(msgs))
		for i, msg := range msgs {
			m[i] = chat.Message{Role: msg.Role, Content: msg.Content}
		}
		return r.t.Render(m, true)
	})
}
