package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The OpenAI-compatible API as vLLM serves it: /v1/completions, /v1/chat/completions and
// /v1/models. Unknown request fields are ignored and logged (vLLM's OpenAIBaseModel allows
// extra fields and logs them); errors are vLLM's {"error": {"message", "type", "param", "code"}}.

func (s *Server) openaiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("GET /v1/models", s.handleModels)
}

type openaiError struct {
	Error openaiErrorInfo `json:"error"`
}

type openaiErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func writeOpenAIError(w http.ResponseWriter, err error) {
	status := statusOf(err)
	typ := "BadRequestError"
	switch status {
	case http.StatusBadRequest:
	case http.StatusServiceUnavailable:
		typ = "ServiceUnavailableError"
	default:
		typ = "InternalServerError"
	}
	writeJSON(w, status, openaiError{Error: openaiErrorInfo{Message: err.Error(), Type: typ, Code: status}})
}

// openaiSampling holds the sampling fields completions and chat share.
type openaiSampling struct {
	Model                  *string            `json:"model"`
	Temperature            *float64           `json:"temperature"`
	TopP                   *float64           `json:"top_p"`
	TopK                   *int               `json:"top_k"`
	MinP                   *float64           `json:"min_p"`
	N                      *int               `json:"n"`
	Stop                   json.RawMessage    `json:"stop"`
	StopTokenIDs           []int32            `json:"stop_token_ids"`
	IgnoreEOS              bool               `json:"ignore_eos"`
	Seed                   *json.Number       `json:"seed"` // int64 (vLLM) or uint64 (stx's seeds)
	Stream                 bool               `json:"stream"`
	PresencePenalty        *float64           `json:"presence_penalty"`
	FrequencyPenalty       *float64           `json:"frequency_penalty"`
	RepetitionPenalty      *float64           `json:"repetition_penalty"`
	MinTokens              int                `json:"min_tokens"`
	LogitBias              map[string]float64 `json:"logit_bias"`
	PromptLogprobs         *int               `json:"prompt_logprobs"`
	ReturnTokensAsTokenIDs bool               `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs         bool               `json:"return_token_ids"`
	// Accepted without effect: stx's text always skips special tokens, and a request's id,
	// user and priority change nothing here.
	SkipSpecialTokens          *bool           `json:"skip_special_tokens"`
	SpacesBetweenSpecialTokens *bool           `json:"spaces_between_special_tokens"`
	IncludeStopStrInOutput     bool            `json:"include_stop_str_in_output"`
	User                       *string         `json:"user"`
	RequestID                  *string         `json:"request_id"`
	Priority                   int             `json:"priority"`
	StreamOptions              json.RawMessage `json:"stream_options"`
}

// sampling converts the shared fields; maxNew is the request's token budget.
func (o openaiSampling) sampling(maxNew int) (sampling, error) {
	sp := sampling{maxNew: maxNew, temperature: 1, topP: 1, n: 1, stopTokens: o.StopTokenIDs, ignoreEOS: o.IgnoreEOS}
	if o.Temperature != nil {
		sp.temperature = *o.Temperature
	}
	if o.TopP != nil {
		sp.topP = *o.TopP
	}
	if o.TopK != nil {
		if sp.topK = *o.TopK; sp.topK == -1 {
			sp.topK = 0
		}
	}
	if o.N != nil {
		sp.n = *o.N
	}
	if o.Seed != nil {
		seed, err := parseSeed(*o.Seed)
		if err != nil {
			return sp, err
		}
		sp.seed = &seed
	}
	stops, err := stopStrings(o.Stop)
	if err != nil {
		return sp, err
	}
	sp.stopStrings = stops
	switch {
	case !isNull(o.StreamOptions) && !o.Stream:
		return sp, badRequest("Stream options can only be defined when `stream=True`.")
	case o.IncludeStopStrInOutput:
		return sp, badRequest("include_stop_str_in_output: stx serve supports only false")
	case o.MinP != nil && *o.MinP != 0:
		return sp, badRequest("min_p: stx serve supports only 0")
	case o.PresencePenalty != nil && *o.PresencePenalty != 0:
		return sp, badRequest("presence_penalty: stx serve supports only 0")
	case o.FrequencyPenalty != nil && *o.FrequencyPenalty != 0:
		return sp, badRequest("frequency_penalty: stx serve supports only 0")
	case o.RepetitionPenalty != nil && *o.RepetitionPenalty != 1:
		return sp, badRequest("repetition_penalty: stx serve supports only 1")
	case o.MinTokens != 0:
		return sp, badRequest("min_tokens: stx serve supports only 0")
	case len(o.LogitBias) > 0:
		return sp, badRequest("logit_bias is not supported by stx serve")
	case o.PromptLogprobs != nil && *o.PromptLogprobs < 0 && *o.PromptLogprobs != -1:
		return sp, badRequest("`prompt_logprobs` must be a positive value or -1.")
	}
	sp.scorePrompt = o.PromptLogprobs != nil
	return sp, nil
}

// parseSeed reads a seed in int64's range (vLLM's) or uint64's (stx's own seeds); a negative
// one is taken as its two's complement.
func parseSeed(n json.Number) (uint64, error) {
	if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return uint64(v), nil
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, badRequest("seed %s is not a 64-bit integer", n)
	}
	return v, nil
}

type completionRequest struct {
	openaiSampling
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Logprobs  *int            `json:"logprobs"`
	Echo      bool            `json:"echo"`
	BestOf    *int            `json:"best_of"`
	Suffix    *string         `json:"suffix"`
	// vLLM's add_special_tokens: BOS before a text prompt (default true).
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// vllmMaxTokens is vLLM's default max_tokens of /v1/completions.
const vllmMaxTokens = 16

type usageInfo struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails any `json:"prompt_tokens_details"`
}

type completionLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   string              `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	TokenIDs       []int32             `json:"token_ids"`
	PromptLogprobs any                 `json:"prompt_logprobs"`
	PromptTokenIDs []int32             `json:"prompt_token_ids"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       any                `json:"service_tier"`
	SystemFingerprint any                `json:"system_fingerprint"`
	Usage             usageInfo          `json:"usage"`
	KVTransferParams  any                `json:"kv_transfer_params"`
	// WeightVersion is stx's addition: the version of the weights every choice was sampled with.
	WeightVersion string `json:"weight_version"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := s.readOpenAI(r, &req); err != nil {
		writeOpenAIError(w, err)
		return
	}
	resp, err := s.completions(r, &req)
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	if req.Stream {
		writeSSE(w, completionChunks(resp, req.includeUsage()))
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) completions(r *http.Request, req *completionRequest) (*completionResponse, error) {
	switch {
	case req.Echo:
		return nil, badRequest("echo is not supported by stx serve")
	case req.Suffix != nil:
		return nil, badRequest("suffix is not supported by stx serve")
	case req.Logprobs != nil && *req.Logprobs < 0:
		return nil, badRequest("`logprobs` must be a positive value.")
	case req.Logprobs != nil && *req.Logprobs > maxTopLogprobs:
		return nil, badRequest("Requested sample logprobs of %d, which is greater than max allowed: %d", *req.Logprobs, maxTopLogprobs)
	}
	maxNew := vllmMaxTokens
	if req.MaxTokens != nil {
		maxNew = *req.MaxTokens
	}
	sp, err := req.sampling(maxNew)
	if err != nil {
		return nil, err
	}
	if req.Logprobs != nil {
		sp.topN, sp.topFrom = *req.Logprobs, -1
	}
	if req.BestOf != nil && *req.BestOf != sp.n {
		return nil, badRequest("best_of: stx serve supports only best_of equal to n")
	}
	prompts, err := s.openaiPrompts(req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	if err != nil {
		return nil, err
	}
	comps, version, err := s.complete(r.Context(), prompts, repeat(sp, len(prompts)))
	if err != nil {
		return nil, err
	}
	resp := &completionResponse{ID: "cmpl-" + randomID(), Object: "text_completion", Created: time.Now().Unix(),
		Model: s.modelName(req.Model), Choices: []completionChoice{}, WeightVersion: version}
	for i, p := range prompts {
		resp.Usage.PromptTokens += len(p)
		for j := range sp.n {
			c := comps[i*sp.n+j]
			ch := completionChoice{Index: len(resp.Choices), Text: c.text}
			ch.FinishReason, ch.StopReason = openaiFinish(c.finish)
			if req.Logprobs != nil {
				ch.Logprobs = s.completionLogprobs(c, req.ReturnTokensAsTokenIDs)
			}
			if req.ReturnTokenIDs {
				ch.TokenIDs, ch.PromptTokenIDs = nonNil(c.tokens), p
			}
			if sp.scorePrompt {
				ch.PromptLogprobs = s.vllmPromptLogprobs(p, c.promptLogprobs, req.ReturnTokensAsTokenIDs)
			}
			resp.Usage.CompletionTokens += len(c.tokens)
			resp.Choices = append(resp.Choices, ch)
		}
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	return resp, nil
}

// openaiPrompts reads a completion prompt: a string, strings, token ids or lists of them.
func (s *Server) openaiPrompts(raw json.RawMessage, bos bool) ([][]int32, error) {
	if isNull(raw) {
		return nil, badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return [][]int32{ids}, nil
	}
	var idLists [][]int32
	if err := json.Unmarshal(raw, &idLists); err == nil {
		return idLists, nil
	}
	var texts []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		texts = []string{one}
	} else if err := json.Unmarshal(raw, &texts); err != nil {
		return nil, badRequest("prompt must be a string, a list of strings, a list of token ids or a list of such lists")
	}
	if s.opt.Tokenizer == nil {
		return nil, badRequest("this model has no tokenizer: give the prompt as token ids")
	}
	prompts := make([][]int32, len(texts))
	for i, t := range texts {
		if bos {
			prompts[i] = s.encodeText(t)
		} else {
			prompts[i] = s.opt.Tokenizer.Encode(t)
		}
	}
	return prompts, nil
}

// tokenString is vLLM's text of a token in log-probs: its decoded text, or "token_id:ID" when
// asked for or when the token has no text (a special token, or a model without tokenizer).
func (s *Server) tokenString(id int32, asID bool) string {
	if !asID && s.opt.Tokenizer != nil {
		if t := s.opt.Tokenizer.Decode([]int32{id}); t != "" {
			return t
		}
	}
	return "token_id:" + strconv.Itoa(int(id))
}

func (s *Server) completionLogprobs(c completion, asID bool) *completionLogprobs {
	lp := &completionLogprobs{TextOffset: []int{}, TokenLogprobs: []float32{}, Tokens: []string{}, TopLogprobs: []map[string]float32{}}
	offset := 0
	for t, id := range c.tokens {
		tok := s.tokenString(id, asID)
		lp.TextOffset = append(lp.TextOffset, offset)
		lp.TokenLogprobs = append(lp.TokenLogprobs, c.logprobs[t])
		lp.Tokens = append(lp.Tokens, tok)
		// vLLM's top_logprobs: the sampled token and the N most likely ones (N or N+1 entries).
		top := map[string]float32{tok: c.logprobs[t]}
		if t < len(c.top) {
			for _, a := range c.top[t] {
				if a.id != id {
					top[s.tokenString(a.id, asID)] = a.lp
				}
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		offset += utf8.RuneCountInString(tok) // vLLM counts Python characters
	}
	return lp
}

// vllmLogprob is vLLM's Logprob: the rank among the alternatives is unknown to stx (null).
type vllmLogprob struct {
	Logprob      float32 `json:"logprob"`
	Rank         *int    `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// vllmPromptLogprobs is vLLM's prompt_logprobs: null for the first prompt token, then for
// each token a map from its id to its log-prob given the ones before (only the token itself:
// stx computes no alternatives, whatever prompt_logprobs asked for).
func (s *Server) vllmPromptLogprobs(prompt []int32, lps []float32, asID bool) []map[string]vllmLogprob {
	out := make([]map[string]vllmLogprob, len(prompt))
	for t := 1; t < len(prompt); t++ {
		id := prompt[t]
		out[t] = map[string]vllmLogprob{strconv.Itoa(int(id)): {Logprob: lps[t-1], DecodedToken: s.tokenString(id, asID)}}
	}
	return out
}

// openaiFinish is vLLM's finish_reason and stop_reason.
func openaiFinish(f finishReason) (string, any) {
	switch {
	case f.str != "":
		return "stop", f.str
	case f.length:
		return "length", nil
	case f.requested:
		return "stop", f.token
	}
	return "stop", nil // EOS or another of the model's stop ids
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	name := s.modelName(nil)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": name, "object": "model", "created": time.Now().Unix(), "owned_by": "stx", "root": name,
		"parent": nil, "max_model_len": contextLimit(s.cfg), "permission": []any{},
	}}})
}

// modelName is the request's model name when it gave one (stx serves one model whatever the
// name), else the served model's path.
func (s *Server) modelName(req *string) string {
	if req != nil && *req != "" {
		return *req
	}
	return s.opt.ModelPath
}

// readOpenAI decodes a request into v and logs its fields that v does not have, as vLLM does.
func (s *Server) readOpenAI(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return badRequest("Unsupported Media Type: Only 'application/json' is allowed")
	}
	var raw json.RawMessage
	if err := readJSON(r, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest("field %q: JSON %s where %s is expected", te.Field, te.Value, te.Type)
		}
		return badRequest("the request body is not a JSON object of the expected shape: %v", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return badRequest("the request body must be a JSON object")
	}
	known := jsonFields(reflect.TypeOf(v).Elem())
	var ignored []string
	for k := range fields {
		if !known[k] {
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		slices.Sort(ignored)
		fmt.Fprintf(s.log, "stx serve: %s: the following fields were present in the request but ignored: %s\n", r.URL.Path, strings.Join(ignored, ", "))
	}
	return nil
}

// jsonFields is the set of JSON names of a struct's fields, embedded structs' included.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}
