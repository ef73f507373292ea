package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Streaming (stream: true) of /v1/completions and /v1/chat/completions: stx samples whole
// completions, so each choice comes as one chunk with its whole text and finish reason (chat:
// a first chunk with the assistant role, as vLLM sends), then a usage chunk when
// stream_options.include_usage asks for it, then "data: [DONE]".

// includeUsage reads stream_options.include_usage.
func (o openaiSampling) includeUsage() bool {
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return !isNull(o.StreamOptions) && json.Unmarshal(o.StreamOptions, &so) == nil && so.IncludeUsage
}

// writeSSE writes events as server-sent events, then [DONE].
func writeSSE(w http.ResponseWriter, events []any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for _, e := range events {
		js, err := json.Marshal(e)
		if err != nil {
			js, _ = json.Marshal(openaiError{Error: openaiErrorInfo{Message: err.Error(), Type: "InternalServerError", Code: 500}})
		}
		fmt.Fprintf(w, "data: %s\n\n", js)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

type streamChunk struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []any      `json:"choices"`
	Usage   *usageInfo `json:"usage,omitempty"`
	// WeightVersion is stx's addition, as in the whole responses.
	WeightVersion string `json:"weight_version"`
}

type completionStreamChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   string              `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	PromptTokenIDs []int32             `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int32             `json:"token_ids,omitempty"`
}

func completionChunks(resp *completionResponse, usage bool) []any {
	var out []any
	for _, c := range resp.Choices {
		out = append(out, streamChunk{ID: resp.ID, Object: resp.Object, Created: resp.Created, Model: resp.Model,
			WeightVersion: resp.WeightVersion, Choices: []any{completionStreamChoice{Index: c.Index, Text: c.Text, Logprobs: c.Logprobs,
				FinishReason: c.FinishReason, StopReason: c.StopReason, PromptTokenIDs: c.PromptTokenIDs, TokenIDs: c.TokenIDs}}})
	}
	if usage {
		out = append(out, streamChunk{ID: resp.ID, Object: resp.Object, Created: resp.Created, Model: resp.Model,
			WeightVersion: resp.WeightVersion, Choices: []any{}, Usage: &resp.Usage})
	}
	return out
}

type chatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type chatStreamChoice struct {
	Index        int          `json:"index"`
	Delta        chatDelta    `json:"delta"`
	Logprobs     *chatContent `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
	StopReason   any          `json:"stop_reason"`
	TokenIDs     []int32      `json:"token_ids,omitempty"`
}

func chatChunks(resp *chatResponse, usage bool) []any {
	chunk := func(choices ...any) streamChunk {
		return streamChunk{ID: resp.ID, Object: "chat.completion.chunk", Created: resp.Created, Model: resp.Model,
			WeightVersion: resp.WeightVersion, Choices: choices}
	}
	var out []any
	for _, c := range resp.Choices {
		out = append(out, chunk(chatStreamChoice{Index: c.Index, Delta: chatDelta{Role: "assistant"}}))
		finish := c.FinishReason
		out = append(out, chunk(chatStreamChoice{Index: c.Index, Delta: chatDelta{Content: c.Message.Content}, Logprobs: c.Logprobs,
			FinishReason: &finish, StopReason: c.StopReason, TokenIDs: c.TokenIDs}))
	}
	if usage {
		u := chunk()
		u.Choices, u.Usage = []any{}, &resp.Usage
		out = append(out, u)
	}
	return out
}
