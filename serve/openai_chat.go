package serve

import (
	"encoding/json"
	"net/http"
	"time"
)

// /v1/chat/completions as vLLM serves it: the messages rendered with the model's chat
// template (and the generation prompt), sampled like a completion.

type chatRequest struct {
	openaiSampling
	Messages             json.RawMessage `json:"messages"`
	MaxTokens            *int            `json:"max_tokens"`
	MaxCompletionTokens  *int            `json:"max_completion_tokens"`
	Logprobs             bool            `json:"logprobs"`
	TopLogprobs          *int            `json:"top_logprobs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ChatTemplateKwargs   map[string]any  `json:"chat_template_kwargs"`
	Tools                json.RawMessage `json:"tools"`
	ToolChoice           json.RawMessage `json:"tool_choice"`
}

type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatMessage struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	Refusal          any    `json:"refusal"`
	Annotations      any    `json:"annotations"`
	Audio            any    `json:"audio"`
	FunctionCall     any    `json:"function_call"`
	ToolCalls        []any  `json:"tool_calls"`
	Reasoning        any    `json:"reasoning"`
	ReasoningContent any    `json:"reasoning_content"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      chatMessage  `json:"message"`
	Logprobs     *chatContent `json:"logprobs"`
	FinishReason string       `json:"finish_reason"`
	StopReason   any          `json:"stop_reason"`
	TokenIDs     []int32      `json:"token_ids"`
}

type chatContent struct {
	Content []chatLogprob `json:"content"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       any          `json:"service_tier"`
	SystemFingerprint any          `json:"system_fingerprint"`
	Usage             usageInfo    `json:"usage"`
	PromptLogprobs    any          `json:"prompt_logprobs"`
	PromptTokenIDs    []int32      `json:"prompt_token_ids"`
	KVTransferParams  any          `json:"kv_transfer_params"`
	WeightVersion     string       `json:"weight_version"` // stx's addition, as in completions
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := s.readOpenAI(r, &req); err != nil {
		writeOpenAIError(w, err)
		return
	}
	resp, err := s.chat(r, &req)
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	if req.Stream {
		writeSSE(w, chatChunks(resp, req.includeUsage()))
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) chat(r *http.Request, req *chatRequest) (*chatResponse, error) {
	if s.opt.Template == nil || s.opt.Tokenizer == nil {
		return nil, badRequest("this model has no chat template and tokenizer: use /v1/completions or /generate")
	}
	if req.TopLogprobs != nil && (*req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs) {
		return nil, badRequest("top_logprobs must be in [0, %d], got %d", maxTopLogprobs, *req.TopLogprobs)
	}
	if req.ContinueFinalMessage {
		return nil, badRequest("continue_final_message is not supported by stx serve")
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(req.Messages, &msgs); err != nil || len(msgs) == 0 {
		return nil, badRequest("messages must be a non-empty list of messages")
	}
	vars := map[string]any{}
	for k, v := range req.ChatTemplateKwargs {
		vars[k] = v
	}
	if !isNull(req.Tools) {
		vars["tools"] = req.Tools
	}
	text, err := s.opt.Template.RenderWith(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt, vars)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	// The template writes the special tokens itself (vLLM renders chats without add_special_tokens).
	prompt := s.opt.Tokenizer.Encode(text)
	if len(prompt) == 0 {
		return nil, badRequest("the chat template rendered the messages as empty text")
	}
	limit := contextLimit(s.cfg)
	maxNew := limit - len(prompt) // vLLM's default: the rest of the context
	if limit > 0 && maxNew < 1 && req.MaxTokens == nil && req.MaxCompletionTokens == nil {
		return nil, badRequest("this model's maximum context length is %d tokens; the messages have %d", limit, len(prompt))
	}
	if req.MaxTokens != nil {
		maxNew = *req.MaxTokens
	}
	if req.MaxCompletionTokens != nil {
		maxNew = *req.MaxCompletionTokens
	}
	sp, err := req.sampling(maxNew)
	if err != nil {
		return nil, err
	}
	if req.Logprobs && req.TopLogprobs != nil {
		sp.topN, sp.topFrom = *req.TopLogprobs, -1
	}
	comps, version, err := s.complete(r.Context(), [][]int32{prompt}, []sampling{sp})
	if err != nil {
		return nil, err
	}
	resp := &chatResponse{ID: "chatcmpl-" + randomID(), Object: "chat.completion", Created: time.Now().Unix(),
		Model: s.modelName(req.Model), Choices: []chatChoice{}, WeightVersion: version}
	resp.Usage.PromptTokens = len(prompt)
	if req.ReturnTokenIDs {
		resp.PromptTokenIDs = prompt
	}
	if sp.scorePrompt && len(comps) > 0 {
		resp.PromptLogprobs = s.vllmPromptLogprobs(prompt, comps[0].promptLogprobs, req.ReturnTokensAsTokenIDs)
	}
	for i, c := range comps {
		ch := chatChoice{Index: i, Message: chatMessage{Role: "assistant", Content: c.text, ToolCalls: []any{}}}
		ch.FinishReason, ch.StopReason = openaiFinish(c.finish)
		if req.Logprobs {
			content := []chatLogprob{}
			for t, id := range c.tokens {
				tok := s.tokenString(id, req.ReturnTokensAsTokenIDs)
				e := chatLogprob{Token: tok, Logprob: c.logprobs[t], Bytes: tokenBytes(tok), TopLogprobs: []chatTopLogprob{}}
				if t < len(c.top) {
					for _, a := range c.top[t] {
						at := s.tokenString(a.id, req.ReturnTokensAsTokenIDs)
						e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: at, Logprob: a.lp, Bytes: tokenBytes(at)})
					}
				}
				content = append(content, e)
			}
			ch.Logprobs = &chatContent{Content: content}
		}
		if req.ReturnTokenIDs {
			ch.TokenIDs = nonNil(c.tokens)
		}
		resp.Usage.CompletionTokens += len(c.tokens)
		resp.Choices = append(resp.Choices, ch)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	return resp, nil
}

// tokenBytes is OpenAI's bytes of a token's text.
func tokenBytes(tok string) []int {
	b := []int{}
	for _, x := range []byte(tok) {
		b = append(b, int(x))
	}
	return b
}
