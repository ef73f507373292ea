package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// SGLang's native API: /generate, /update_weights_from_disk, /get_model_info,
// /get_weight_version, /health, /health_generate, /flush_cache. Errors are SGLang's
// {"error": {"message": ...}} with HTTP 400.

func (s *Server) sglangRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /generate", s.handleGenerate)
	mux.HandleFunc("PUT /generate", s.handleGenerate)
	mux.HandleFunc("POST /update_weights_from_disk", s.handleUpdateWeights)
	mux.HandleFunc("GET /get_model_info", s.handleModelInfo)
	mux.HandleFunc("GET /get_weight_version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"weight_version": s.WeightVersion()})
	})
	health := func(w http.ResponseWriter, _ *http.Request) {
		if s.closing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	mux.HandleFunc("GET /health", health)
	mux.HandleFunc("GET /health_generate", health)
	flush := func(w http.ResponseWriter, _ *http.Request) {
		// stx keeps no prefix cache between requests: there is nothing to flush.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "Cache flushed.\n")
	}
	mux.HandleFunc("GET /flush_cache", flush)
	mux.HandleFunc("POST /flush_cache", flush)
}

type sglangError struct {
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
}

func writeSGLangError(w http.ResponseWriter, err error) {
	var e sglangError
	e.Error.Message = err.Error()
	writeJSON(w, statusOf(err), e)
}

// generateRequest is SGLang's GenerateReqInput, the fields stx reads. Fields that are a value
// or a list of values (one per prompt) stay raw until the number of prompts is known.
type generateRequest struct {
	Text                 json.RawMessage `json:"text"`
	InputIDs             json.RawMessage `json:"input_ids"`
	SamplingParams       json.RawMessage `json:"sampling_params"`
	ReturnLogprob        json.RawMessage `json:"return_logprob"`
	LogprobStartLen      json.RawMessage `json:"logprob_start_len"`
	TopLogprobsNum       json.RawMessage `json:"top_logprobs_num"`
	ReturnTextInLogprobs bool            `json:"return_text_in_logprobs"`
	Rid                  json.RawMessage `json:"rid"`
	Stream               bool            `json:"stream"`
}

// samplingParams is SGLang's SamplingParams; unknown keys are refused (SGLang builds the
// object with SamplingParams(**params), which refuses them too). Pointers tell an absent
// value from a zero one.
type samplingParams struct {
	MaxNewTokens               *int            `json:"max_new_tokens"`
	Temperature                *float64        `json:"temperature"`
	TopP                       *float64        `json:"top_p"`
	TopK                       *int            `json:"top_k"`
	MinP                       *float64        `json:"min_p"`
	N                          *int            `json:"n"`
	StopTokenIDs               []int32         `json:"stop_token_ids"`
	Stop                       json.RawMessage `json:"stop"`
	IgnoreEOS                  bool            `json:"ignore_eos"`
	SamplingSeed               *uint64         `json:"sampling_seed"`
	SkipSpecialTokens          *bool           `json:"skip_special_tokens"`
	SpacesBetweenSpecialTokens *bool           `json:"spaces_between_special_tokens"`
	NoStopTrim                 *bool           `json:"no_stop_trim"`
	FrequencyPenalty           *float64        `json:"frequency_penalty"`
	PresencePenalty            *float64        `json:"presence_penalty"`
	RepetitionPenalty          *float64        `json:"repetition_penalty"`
	MinNewTokens               *int            `json:"min_new_tokens"`
}

// SGLang's defaults.
const (
	sglangMaxNewTokens = 128
	greedyBelow        = 1e-6 // SGLang samples greedily below this temperature
)

func (p samplingParams) sampling() (sampling, error) {
	sp := sampling{maxNew: sglangMaxNewTokens, temperature: 1, topP: 1, n: 1,
		stopTokens: p.StopTokenIDs, ignoreEOS: p.IgnoreEOS, seed: p.SamplingSeed}
	if p.MaxNewTokens != nil {
		sp.maxNew = *p.MaxNewTokens
	}
	if p.Temperature != nil {
		sp.temperature = *p.Temperature
		if sp.temperature >= 0 && sp.temperature < greedyBelow {
			sp.temperature = 0
		}
	}
	if p.TopP != nil {
		sp.topP = *p.TopP
	}
	if p.TopK != nil {
		sp.topK = *p.TopK
		if sp.topK == -1 {
			sp.topK = 0
		}
	}
	if p.N != nil {
		sp.n = *p.N
	}
	stops, err := stopStrings(p.Stop)
	if err != nil {
		return sp, err
	}
	sp.stopStrings = stops
	for _, c := range []struct {
		name     string
		set      bool
		neutral  bool
		required string
	}{
		{"min_p", p.MinP != nil, p.MinP == nil || *p.MinP == 0, "0"},
		{"frequency_penalty", p.FrequencyPenalty != nil, p.FrequencyPenalty == nil || *p.FrequencyPenalty == 0, "0"},
		{"presence_penalty", p.PresencePenalty != nil, p.PresencePenalty == nil || *p.PresencePenalty == 0, "0"},
		{"repetition_penalty", p.RepetitionPenalty != nil, p.RepetitionPenalty == nil || *p.RepetitionPenalty == 1, "1"},
		{"min_new_tokens", p.MinNewTokens != nil, p.MinNewTokens == nil || *p.MinNewTokens == 0, "0"},
	} {
		if !c.neutral {
			return sp, badRequest("sampling_params.%s: stx serve supports only %s", c.name, c.required)
		}
	}
	return sp, nil
}

// stopStrings reads null, a string or a list of strings; empty strings are refused.
func stopStrings(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		raw = json.RawMessage(`[` + string(raw) + `]`)
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop must be a string or a list of strings, got %s", raw)
	}
	for _, s := range many {
		if s == "" {
			return nil, badRequest("stop strings must not be empty")
		}
	}
	return many, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// perPrompt decodes raw, a value of type T or a list of them (one per prompt), into one value
// per prompt; absent: def for all.
func perPrompt[T any](name string, raw json.RawMessage, prompts int, def T) ([]T, error) {
	out := make([]T, prompts)
	for i := range out {
		out[i] = def
	}
	if isNull(raw) {
		return out, nil
	}
	var one T
	if err := strictUnmarshal(raw, &one); err == nil {
		for i := range out {
			out[i] = one
		}
		return out, nil
	} else if bytes.TrimSpace(raw)[0] != '[' {
		return nil, badRequest("%s: %v", name, err)
	}
	var many []T
	if err := strictUnmarshal(raw, &many); err != nil {
		return nil, badRequest("%s: %v", name, err)
	}
	if len(many) != prompts {
		return nil, badRequest("%s has %d entries for %d prompts", name, len(many), prompts)
	}
	return many, nil
}

// strictUnmarshal decodes refusing unknown object keys.
func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// prompts reads text or input_ids: one prompt or a batch.
func (s *Server) sglangPrompts(req *generateRequest) (prompts [][]int32, batch bool, err error) {
	hasText, hasIDs := !isNull(req.Text), !isNull(req.InputIDs)
	switch {
	case hasText == hasIDs:
		return nil, false, badRequest("give exactly one of text and input_ids")
	case hasIDs:
		var one []int32
		if err := json.Unmarshal(req.InputIDs, &one); err == nil {
			return [][]int32{one}, false, nil
		}
		var many [][]int32
		if err := json.Unmarshal(req.InputIDs, &many); err != nil {
			return nil, false, badRequest("input_ids must be a list of token ids or a list of such lists")
		}
		return many, true, nil
	}
	tok := s.opt.Tokenizer
	if tok == nil {
		return nil, false, badRequest("this model has no tokenizer: give input_ids instead of text")
	}
	var texts []string
	var one string
	if err := json.Unmarshal(req.Text, &one); err == nil {
		texts = []string{one}
	} else if err := json.Unmarshal(req.Text, &texts); err != nil {
		return nil, false, badRequest("text must be a string or a list of strings")
	} else {
		batch = true
	}
	for _, t := range texts {
		prompts = append(prompts, s.encodeText(t))
	}
	return prompts, batch, nil
}

// encodeText tokenizes a prompt text with BOS first when the tokenizer has one, as the
// Hugging Face tokenizers SGLang and vLLM call add it.
func (s *Server) encodeText(text string) []int32 {
	tok := s.opt.Tokenizer
	var ids []int32
	if b := tok.BOS(); b >= 0 {
		ids = append(ids, b)
	}
	return append(ids, tok.Encode(text)...)
}

// generateOutput is one sample of a /generate response.
type generateOutput struct {
	Text      *string    `json:"text,omitempty"`
	OutputIDs []int32    `json:"output_ids"`
	MetaInfo  sglangMeta `json:"meta_info"`
}

type sglangMeta struct {
	ID                  string           `json:"id"`
	FinishReason        map[string]any   `json:"finish_reason"`
	PromptTokens        int              `json:"prompt_tokens"`
	WeightVersion       string           `json:"weight_version"`
	TotalRetractions    int              `json:"total_retractions"`
	CompletionTokens    int              `json:"completion_tokens"`
	CachedTokens        int              `json:"cached_tokens"`
	E2ELatency          float64          `json:"e2e_latency"`
	InputTokenLogprobs  *[]logprobTriple `json:"input_token_logprobs,omitempty"`
	OutputTokenLogprobs *[]logprobTriple `json:"output_token_logprobs,omitempty"`
	// With top_logprobs_num N > 0: each position's N most likely tokens, best first.
	InputTopLogprobs  *[]any             `json:"input_top_logprobs,omitempty"`
	OutputTopLogprobs *[][]logprobTriple `json:"output_top_logprobs,omitempty"`
}

// logprobTriple is SGLang's (logprob, token_id, text-or-null).
type logprobTriple [3]any

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req generateRequest
	if err := readJSON(r, &req); err != nil {
		writeSGLangError(w, err)
		return
	}
	out, batch, err := s.generate(r, &req, start)
	if err != nil {
		writeSGLangError(w, err)
		return
	}
	var body any = out
	if !batch && len(out) == 1 {
		body = out[0]
	}
	if req.Stream {
		// One event with the whole result: stx does not stream tokens as they come.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		js, _ := json.Marshal(body)
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", js)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) generate(r *http.Request, req *generateRequest, start time.Time) ([]generateOutput, bool, error) {
	prompts, batch, err := s.sglangPrompts(req)
	if err != nil {
		return nil, false, err
	}
	if len(prompts) == 0 {
		return nil, false, badRequest("input_ids or text is an empty batch")
	}
	params, err := perPrompt("sampling_params", req.SamplingParams, len(prompts), samplingParams{})
	if err != nil {
		return nil, false, err
	}
	logprob, err := perPrompt("return_logprob", req.ReturnLogprob, len(prompts), false)
	if err != nil {
		return nil, false, err
	}
	startLen, err := perPrompt("logprob_start_len", req.LogprobStartLen, len(prompts), -1)
	if err != nil {
		return nil, false, err
	}
	topNum, err := perPrompt("top_logprobs_num", req.TopLogprobsNum, len(prompts), 0)
	if err != nil {
		return nil, false, err
	}
	rids, err := perPrompt("rid", req.Rid, len(prompts), "")
	if err != nil {
		return nil, false, err
	}
	sps := make([]sampling, len(prompts))
	for i, p := range params {
		if sps[i], err = p.sampling(); err != nil {
			return nil, false, err
		}
		switch {
		case startLen[i] < -1:
			return nil, false, badRequest("logprob_start_len must be ≥ -1, got %d", startLen[i])
		case startLen[i] >= len(prompts[i]):
			return nil, false, badRequest("logprob_start_len (%d) must be less than the prompt's length (%d)", startLen[i], len(prompts[i]))
		}
		sps[i].scorePrompt = logprob[i] && startLen[i] >= 0
		if topNum[i] < 0 || topNum[i] > maxTopLogprobs {
			return nil, false, badRequest("top_logprobs_num must be in [0, %d], got %d", maxTopLogprobs, topNum[i])
		}
		if logprob[i] && topNum[i] > 0 {
			sps[i].topN, sps[i].topFrom = topNum[i], startLen[i]
		}
	}
	comps, version, err := s.complete(r.Context(), prompts, sps)
	if err != nil {
		return nil, false, err
	}
	latency := time.Since(start).Seconds()
	var out []generateOutput
	k := 0
	for i, p := range prompts {
		for range sps[i].n {
			c := comps[k]
			k++
			rid := rids[i]
			if rid == "" {
				rid = randomID()
			}
			o := generateOutput{OutputIDs: nonNil(c.tokens), MetaInfo: sglangMeta{
				ID: rid, FinishReason: sglangFinish(c.finish, sps[i].maxNew), PromptTokens: len(p),
				WeightVersion: version, CompletionTokens: len(c.tokens), E2ELatency: latency,
			}}
			if s.opt.Tokenizer != nil {
				o.Text = &c.text
			}
			if logprob[i] {
				triple := func(lp any, id int32) logprobTriple {
					t := logprobTriple{lp, id, nil}
					if req.ReturnTextInLogprobs && s.opt.Tokenizer != nil {
						t[2] = s.opt.Tokenizer.Decode([]int32{id})
					}
					return t
				}
				// Prompt positions from logprob_start_len on; the first token has no log-prob.
				in := []logprobTriple{}
				if startLen[i] >= 0 {
					for t := startLen[i]; t < len(p); t++ {
						var lp any
						if t > 0 {
							lp = c.promptLogprobs[t-1]
						}
						in = append(in, triple(lp, p[t]))
					}
				}
				outLP := make([]logprobTriple, len(c.tokens))
				for t, id := range c.tokens {
					outLP[t] = triple(c.logprobs[t], id)
				}
				o.MetaInfo.InputTokenLogprobs, o.MetaInfo.OutputTokenLogprobs = &in, &outLP
				if topNum[i] > 0 {
					// Each position's most likely tokens, best first (null for prompt
					// position 0, which nothing predicts).
					triples := func(alts []alt) []logprobTriple {
						l := make([]logprobTriple, len(alts))
						for j, a := range alts {
							l[j] = triple(a.lp, a.id)
						}
						return l
					}
					inTop := make([]any, len(in))
					for t := range in {
						if alts := c.promptTop[t]; alts != nil {
							inTop[t] = triples(alts)
						}
					}
					outTop := make([][]logprobTriple, len(outLP))
					for t := range outLP {
						outTop[t] = triples(c.top[t])
					}
					o.MetaInfo.InputTopLogprobs, o.MetaInfo.OutputTopLogprobs = &inTop, &outTop
				}
			}
			out = append(out, o)
		}
	}
	return out, batch || len(out) > 1, nil
}

// sglangFinish is SGLang's finish_reason object.
func sglangFinish(f finishReason, maxNew int) map[string]any {
	switch {
	case f.str != "":
		return map[string]any{"type": "stop", "matched": f.str}
	case f.length:
		return map[string]any{"type": "length", "length": maxNew}
	}
	return map[string]any{"type": "stop", "matched": f.token}
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

type updateWeightsRequest struct {
	ModelPath     string  `json:"model_path"`
	WeightVersion *string `json:"weight_version"`
}

type updateWeightsResponse struct {
	Success           bool   `json:"success"`
	Message           string `json:"message"`
	NumPausedRequests int    `json:"num_paused_requests"`
}

func (s *Server) handleUpdateWeights(w http.ResponseWriter, r *http.Request) {
	var req updateWeightsRequest
	fail := func(err error) {
		writeJSON(w, http.StatusBadRequest, updateWeightsResponse{Message: err.Error()})
	}
	if err := readJSON(r, &req); err != nil {
		fail(err)
		return
	}
	if req.ModelPath == "" {
		fail(badRequest("model_path is required"))
		return
	}
	version := ""
	if req.WeightVersion != nil {
		if version = *req.WeightVersion; version == "" {
			fail(badRequest("weight_version must not be empty"))
			return
		}
	}
	got, err := s.UpdateWeights(req.ModelPath, version)
	if err != nil {
		fail(fmt.Errorf("failed to update weights: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, updateWeightsResponse{Success: true,
		Message: fmt.Sprintf("Succeeded to update model weights from %s; weight version %s.", req.ModelPath, got)})
}

func (s *Server) handleModelInfo(w http.ResponseWriter, _ *http.Request) {
	c := s.cfg
	var tokPath any
	if s.opt.TokenizerPath != "" {
		tokPath = s.opt.TokenizerPath
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                s.opt.ModelPath,
		"tokenizer_path":            tokPath,
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            s.WeightVersion(),
		"architectures":             []string{c.Architecture},
		"max_positions":             contextLimit(c),
		"vocab_size":                c.VocabSize,
	})
}
