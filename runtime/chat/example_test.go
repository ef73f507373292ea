package chat_test

import (
	"fmt"

	"stx.dev/stx/runtime/chat"
)

// A chat template renders a conversation as the prompt text the model was
// trained on; with addGenerationPrompt it ends with the header of the
// assistant's reply. Extra variables such as Qwen3's enable_thinking go
// through RenderWith.
func Example() {
	tmpl, err := chat.Parse(`{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}`+
		`{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}<nothink>{% endif %}{% endif %}`,
		map[string]string{"bos_token": "<s>"})
	if err != nil {
		panic(err)
	}
	msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "2+2?"}}
	text, err := tmpl.Render(msgs, true)
	if err != nil {
		panic(err)
	}
	fmt.Println(text)
	text, err = tmpl.RenderWith(msgs, true, map[string]any{"enable_thinking": false})
	if err != nil {
		panic(err)
	}
	fmt.Println(text)
	// Output:
	// <s><|system|>Be brief.<|user|>2+2?<|assistant|>
	// <s><|system|>Be brief.<|user|>2+2?<|assistant|><nothink>
}
