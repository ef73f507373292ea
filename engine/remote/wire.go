package remote

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"stx.dev/stx/runtime"
)

// The wire formats of the two protocols: SGLang's native /generate and the OpenAI
// /v1/completions that vLLM (and SGLang) serve. Prompts go as token ids, so the server
// applies no chat template and tokenizes nothing; completions come back as token ids with
// the log-prob of each under the distribution it was drawn from.

// sglangRequest is SGLang's GenerateReqInput for a batch of token prompts.
type sglangRequest struct {
	InputIDs       [][]int32      `json:"input_ids"`
	SamplingParams sglangSampling `json:"sampling_params"`
	ReturnLogprob  bool           `json:"return_logprob"`
}

// sglangSampling are the sampling_params; sampling_seed makes a deterministic server
// (stx serve) draw what the in-process sampler draws for the same seed.
type sglangSampling struct {
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float64 `json:"temperature"`
	TopP         float64 `json:"top_p"`
	TopK         int     `json:"top_k"`
	StopTokenIDs []int32 `json:"stop_token_ids,omitempty"`
	N            int     `json:"n"`
	Seed         uint64  `json:"sampling_seed"`
	// IgnoreEOS leaves the end of a sequence to stop_token_ids alone: stx's stop set already
	// holds the EOS ids it wants.
	IgnoreEOS bool `json:"ignore_eos"`
}

// sglangAnswer is one element of /generate's answer (a list for a batch request).
type sglangAnswer struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		// OutputTokenLogprobs are [logprob, token_id, text] triples.
		OutputTokenLogprobs [][]any         `json:"output_token_logprobs"`
		FinishReason        json.RawMessage `json:"finish_reason"`
		WeightVersion       any             `json:"weight_version"`
	} `json:"meta_info"`
}

// sglangBody is the request body for prompts and o (the seed given separately: a
// request's shard seed).
func sglangBody(prompts [][]int32, o runtime.SampleOptions, seed uint64) any {
	return sglangRequest{InputIDs: prompts, ReturnLogprob: true, SamplingParams: sglangSampling{
		MaxNewTokens: o.MaxNewTokens, Temperature: o.Temperature, TopP: topP(o.TopP), TopK: topK(o.TopK),
		StopTokenIDs: o.StopTokens, N: 1, Seed: seed, IgnoreEOS: len(o.StopTokens) > 0}}
}

// topP and topK are stx's "off" values (0) in the servers' spelling (1 and -1).
func topP(p float64) float64 {
	if p <= 0 {
		return 1
	}
	return p
}

func topK(k int) int {
	if k <= 0 {
		return -1
	}
	return k
}

// parseSGLang reads a /generate answer: a list for a batch (or one object for one prompt).
func parseSGLang(body []byte) ([]answer, error) {
	var list []sglangAnswer
	if err := json.Unmarshal(body, &list); err != nil {
		var one sglangAnswer
		if err1 := json.Unmarshal(body, &one); err1 != nil {
			return nil, fmt.Errorf("answer is not a /generate response: %w", err)
		}
		list = []sglangAnswer{one}
	}
	out := make([]answer, len(list))
	for i, a := range list {
		ids, lps, err := sglangTokens(a)
		if err != nil {
			return nil, fmt.Errorf("answer %d: %w", i, err)
		}
		v, err := versionOf(a.MetaInfo.WeightVersion)
		if err != nil {
			return nil, fmt.Errorf("answer %d: %w", i, err)
		}
		out[i] = answer{tokens: ids, logProbs: lps, finish: finishType(a.MetaInfo.FinishReason), version: v}
	}
	return out, nil
}

// sglangTokens takes the completion's ids from output_token_logprobs, checked against
// output_ids when both are there.
func sglangTokens(a sglangAnswer) ([]int32, []float64, error) {
	trip := a.MetaInfo.OutputTokenLogprobs
	if trip == nil {
		return nil, nil, fmt.Errorf("no meta_info.output_token_logprobs (was return_logprob honoured?)")
	}
	ids := make([]int32, len(trip))
	lps := make([]float64, len(trip))
	for j, t := range trip {
		if len(t) < 2 {
			return nil, nil, fmt.Errorf("output_token_logprobs[%d] has %d fields, want [logprob, token_id, text]", j, len(t))
		}
		lp, ok1 := t[0].(float64)
		id, ok2 := t[1].(float64)
		if !ok1 || !ok2 || id != float64(int32(id)) {
			return nil, nil, fmt.Errorf("output_token_logprobs[%d] = %v is not [logprob, token_id, ...]", j, t)
		}
		ids[j], lps[j] = int32(id), lp
	}
	if a.OutputIDs != nil && !equalIDs(a.OutputIDs, ids) {
		return nil, nil, fmt.Errorf("output_ids (%d tokens) differ from output_token_logprobs' (%d)", len(a.OutputIDs), len(ids))
	}
	return ids, lps, nil
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// finishType is finish_reason's type: SGLang sends {"type": "stop"|"length", ...}, OpenAI a
// string.
func finishType(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Type
	}
	return ""
}

// versionOf reads a weight version: a number or a decimal string; none is -1 (unknown).
func versionOf(v any) (int, error) {
	switch x := v.(type) {
	case nil:
		return -1, nil
	case float64:
		if x != float64(int(x)) || x < 0 {
			return 0, fmt.Errorf("weight_version %v is not a version number", x)
		}
		return int(x), nil
	case string:
		if x == "" || x == "default" { // SGLang's version before any update
			return -1, nil
		}
		n, err := strconv.Atoi(x)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("weight_version %q is not a version number", x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("weight_version %v is not a version number", v)
}

// openaiRequest is a /v1/completions request with token-id prompts. stop_token_ids,
// top_k, ignore_eos, return_tokens_as_token_ids and return_token_ids are vLLM's extensions;
// seed is the OpenAI field. logprobs 0 asks for the sampled token's log-prob alone.
type openaiRequest struct {
	Model        string    `json:"model,omitempty"`
	Prompt       [][]int32 `json:"prompt"`
	MaxTokens    int       `json:"max_tokens"`
	Temperature  float64   `json:"temperature"`
	TopP         float64   `json:"top_p"`
	TopK         int       `json:"top_k"`
	N            int       `json:"n"`
	Logprobs     int       `json:"logprobs"`
	Seed         uint64    `json:"seed"`
	StopTokenIDs []int32   `json:"stop_token_ids,omitempty"`
	IgnoreEOS    bool      `json:"ignore_eos"`
	TokenIDs     bool      `json:"return_tokens_as_token_ids"`
	// ReturnTokenIDs asks vLLM (≥ 0.10) and stx serve for each choice's token_ids.
	ReturnTokenIDs bool `json:"return_token_ids"`
}

func openaiBody(model string, prompts [][]int32, o runtime.SampleOptions, seed uint64) any {
	return openaiRequest{Model: model, Prompt: prompts, MaxTokens: o.MaxNewTokens, Temperature: o.Temperature,
		TopP: topP(o.TopP), TopK: topK(o.TopK), N: 1, Logprobs: 0, Seed: seed, StopTokenIDs: o.StopTokens,
		IgnoreEOS: len(o.StopTokens) > 0, TokenIDs: true, ReturnTokenIDs: true}
}

// openaiAnswer is a /v1/completions response; choices come back in prompt order (index).
type openaiAnswer struct {
	Choices []struct {
		Index    int `json:"index"`
		Logprobs *struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float64 `json:"token_logprobs"`
		} `json:"logprobs"`
		// TokenIDs is vLLM's return_token_ids field, when the server sends it.
		TokenIDs     []int32         `json:"token_ids"`
		FinishReason json.RawMessage `json:"finish_reason"`
	} `json:"choices"`
	// WeightVersion is stx serve's extension (absent from other servers).
	WeightVersion any `json:"weight_version"`
}

func parseOpenAI(body []byte, rows int) ([]answer, error) {
	var a openaiAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("answer is not a /v1/completions response: %w", err)
	}
	v, err := versionOf(a.WeightVersion)
	if err != nil {
		return nil, err
	}
	if len(a.Choices) != rows {
		return nil, fmt.Errorf("%d choices for %d prompts", len(a.Choices), rows)
	}
	out := make([]answer, rows)
	seen := make([]bool, rows)
	for _, c := range a.Choices {
		if c.Index < 0 || c.Index >= rows || seen[c.Index] {
			return nil, fmt.Errorf("choice index %d is out of range or repeated", c.Index)
		}
		seen[c.Index] = true
		if c.Logprobs == nil {
			return nil, fmt.Errorf("choice %d has no logprobs (was logprobs honoured?)", c.Index)
		}
		ids := c.TokenIDs
		if ids == nil {
			ids = make([]int32, len(c.Logprobs.Tokens))
			for j, t := range c.Logprobs.Tokens {
				n, err := strconv.ParseInt(strings.TrimPrefix(t, "token_id:"), 10, 32)
				if err != nil || !strings.HasPrefix(t, "token_id:") {
					return nil, fmt.Errorf("choice %d token %d is %q, not \"token_id:<id>\" (return_tokens_as_token_ids)", c.Index, j, t)
				}
				ids[j] = int32(n)
			}
		}
		out[c.Index] = answer{tokens: ids, logProbs: c.Logprobs.TokenLogprobs, finish: finishType(c.FinishReason), version: v}
	}
	return out, nil
}

// updateRequest is SGLang's UpdateWeightFromDiskReqInput.
type updateRequest struct {
	ModelPath     string `json:"model_path"`
	WeightVersion string `json:"weight_version"`
	FlushCache    bool   `json:"flush_cache"`
}

// updateAnswer is its answer.
type updateAnswer struct {
	Success *bool  `json:"success"`
	Message string `json:"message"`
}
