package engine

import (
	"fmt"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/engine/workflow"
	"stx.dev/stx/runtime/chat"
)

// promptRenderer is how the rollout model turns chat messages into its
// prompt text. A Hugging Face model directory with a chat template
// (tokenizer_config.json "chat_template" or chat_template.jinja) renders them
// with it, as apply_chat_template does, and templated is true: every prompt
// then goes through the template, which also writes the special tokens
// (BOS) the model expects. The others (the built-in byte-level models, which
// were never trained on a chat format) get tasks.PlainRenderer's
// "role: content" lines, and text prompts stay as they are.
func promptRenderer(modelDir string) (r tasks.PromptRenderer, templated bool, err error) {
	if modelDir == "" || !chat.Has(modelDir) {
		return tasks.PlainRenderer{}, false, nil
	}
	t, err := chat.Load(modelDir)
	if err != nil {
		return nil, false, fmt.Errorf("chat template of %s: %w", modelDir, err)
	}
	return templateRenderer{t}, true, nil
}

// renderPrompts sets the prompt text of exs from their chat messages; with
// a chat template, a text prompt is first made the user's message, so that
// the model sees every prompt in the format it was trained on.
func (g *rolloutGen) renderPrompts(exs []tasks.Example) error {
	if g.enc.templated {
		for i := range exs {
			if len(exs[i].Messages) == 0 {
				exs[i].Messages = []tasks.Message{{Role: "user", Content: exs[i].Prompt}}
			}
		}
	}
	return tasks.RenderPrompts(exs, g.render)
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
