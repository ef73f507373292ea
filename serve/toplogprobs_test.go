package serve

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"testing"

	"stx.dev/stx/runtime"
)

// TestTopLogprobs: SGLang's top_logprobs_num lists, at every output and prompt position, the
// N most likely tokens with their log-probs under the distribution the token was sampled
// from; checked against runtime.Scorer's log-probs of every token of the vocabulary at
// that position (temperature applied in float64), and, greedy, the first entry is the
// sampled token with the decoder's log-prob.
func TestTopLogprobs(t *testing.T) {
	_, ts := tinyServer(t, nil)
	m := tinyModel(t, 1)
	sc, err := runtime.NewScorer(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	prompt := testPrompts[0]
	const n, maxNew = 5, 4
	for _, temp := range []float64{0, 0.7} {
		req := map[string]any{"input_ids": prompt, "return_logprob": true, "top_logprobs_num": n, "logprob_start_len": 0,
			"sampling_params": map[string]any{"max_new_tokens": maxNew, "temperature": temp, "ignore_eos": true, "sampling_seed": 3}}
		var g struct {
			OutputIDs []int32 `json:"output_ids"`
			MetaInfo  struct {
				Output    [][3]any          `json:"output_token_logprobs"`
				OutputTop [][][3]any        `json:"output_top_logprobs"`
				InputTop  []*[][3]any       `json:"input_top_logprobs"`
				Input     []json.RawMessage `json:"input_token_logprobs"`
			} `json:"meta_info"`
		}
		post(t, ts.URL, "/generate", req, &g)
		if len(g.MetaInfo.OutputTop) != maxNew || len(g.MetaInfo.InputTop) != len(prompt) || g.MetaInfo.InputTop[0] != nil {
			t.Fatalf("temperature %g: %d output and %d input positions (first %v)", temp, len(g.MetaInfo.OutputTop), len(g.MetaInfo.InputTop), g.MetaInfo.InputTop[0])
		}
		seq := append(append([]int32{}, prompt...), g.OutputIDs...)
		// Position p (≥ 1) predicts seq[p]; prompt positions at temperature 1.
		for p := 1; p < len(seq); p++ {
			var got [][3]any
			tp := 1.0
			if p >= len(prompt) {
				got = g.MetaInfo.OutputTop[p-len(prompt)]
				if temp > 0 {
					tp = temp
				}
			} else {
				got = *g.MetaInfo.InputTop[p]
			}
			want := referenceTop(t, sc, seq[:p], m.Config.VocabSize, tp)
			if len(got) != n {
				t.Fatalf("temperature %g position %d: %d alternatives, want %d", temp, p, len(got), n)
			}
			byID := map[int32]float32{}
			for _, a := range want {
				byID[a.id] = a.lp
			}
			for j, e := range got {
				// The j-th best log-prob, of a token that has it (near-ties may swap).
				id, lp := int32(e[1].(float64)), e[0].(float64)
				if math.Abs(lp-float64(byID[id])) > 1e-4 || math.Abs(lp-float64(want[j].lp)) > 1e-4 {
					t.Errorf("temperature %g position %d: alternative %d is %d (%.6f), Scorer's %d (%.6f)", temp, p, j, id, lp, want[j].id, want[j].lp)
				}
			}
			if p >= len(prompt) && temp == 0 {
				sampled := g.MetaInfo.Output[p-len(prompt)]
				if got[0][1] != sampled[1] || math.Abs(got[0][0].(float64)-sampled[0].(float64)) > 1e-4 {
					t.Errorf("greedy position %d: best alternative %v, sampled %v", p, got[0], sampled)
				}
			}
		}
	}
}

// referenceTop is every token's log-prob after prefix under the Scorer, tempered in
// float64 (log_softmax(lp / T) = log_softmax(logits / T)), best first.
func referenceTop(t *testing.T, sc *runtime.Scorer, prefix []int32, vocab int, temp float64) []alt {
	t.Helper()
	seqs := make([][]int32, vocab)
	for v := range vocab {
		seqs[v] = append(append([]int32{}, prefix...), int32(v))
	}
	scored, err := sc.Score(seqs)
	if err != nil {
		t.Fatal(err)
	}
	lp := make([]float64, vocab)
	maxL := math.Inf(-1)
	for v, s := range scored {
		lp[v] = float64(s.LogProbs[len(prefix)-1]) / temp
		maxL = math.Max(maxL, lp[v])
	}
	var sum float64
	for _, x := range lp {
		sum += math.Exp(x - maxL)
	}
	out := make([]alt, vocab)
	for v, x := range lp {
		out[v] = alt{int32(v), float32(x - maxL - math.Log(sum))}
	}
	sort.Slice(out, func(i, j int) bool { return worse(out[j], out[i]) })
	return out
}

// TestCompletionsTopLogprobs: vLLM's top_logprobs of a greedy completion map the N best
// tokens (the sampled one first among them) to the log-probs SGLang's API gives; chat lists
// them best first.
func TestCompletionsTopLogprobs(t *testing.T) {
	_, ts := tinyServer(t, nil)
	prompt := testPrompts[1]
	var g struct {
		MetaInfo struct {
			OutputTop [][][3]any `json:"output_top_logprobs"`
		} `json:"meta_info"`
	}
	post(t, ts.URL, "/generate", map[string]any{"input_ids": prompt, "return_logprob": true, "top_logprobs_num": 3,
		"sampling_params": map[string]any{"max_new_tokens": 3, "temperature": 0, "ignore_eos": true}}, &g)
	var c struct {
		Choices []struct {
			Logprobs struct {
				Tokens []string             `json:"tokens"`
				Top    []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	post(t, ts.URL, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 3, "temperature": 0, "logprobs": 3,
		"ignore_eos": true, "return_tokens_as_token_ids": true}, &c)
	if len(c.Choices) != 1 || len(c.Choices[0].Logprobs.Top) != 3 || len(g.MetaInfo.OutputTop) != 3 {
		t.Fatalf("completions %+v, generate %+v", c, g)
	}
	for p, top := range c.Choices[0].Logprobs.Top {
		if len(top) != 3 {
			t.Errorf("position %d: %d entries, want 3 (the greedy token is among the best)", p, len(top))
		}
		for _, e := range g.MetaInfo.OutputTop[p] {
			key := "token_id:" + strconv.Itoa(int(e[1].(float64)))
			if lp, ok := top[key]; !ok || math.Abs(lp-e[0].(float64)) > 1e-6 {
				t.Errorf("position %d: %s is %v (%v), /generate says %v", p, key, lp, ok, e[0])
			}
		}
		if _, ok := top[c.Choices[0].Logprobs.Tokens[p]]; !ok {
			t.Errorf("position %d: the sampled token %s is not in %v", p, c.Choices[0].Logprobs.Tokens[p], top)
		}
	}
}
