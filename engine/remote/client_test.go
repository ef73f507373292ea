package remote

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"stx.dev/stx/runtime"
)

const (
	vocab = 50
	stop  = 2
)

// fake is an inference server speaking both protocols. Its "model" completes a prompt
// deterministically from the prompt and the seed: token j is (Σprompt + seed + j·7) mod
// vocab, with log-prob −(token+1)/100, and the sequence stops after a stop token
// when one is drawn. Its mode injects faults.
type fake struct {
	t       *testing.T
	mu      sync.Mutex
	mode    string // "", "sleep", "garbage", "nan", "badid", "short", "count", "500"
	version int    // the weight version it reports (-1: none)
	loaded  []string
	calls   int
	srv     *httptest.Server
	release chan struct{} // ends the sleeps
}

func newFake(t *testing.T) *fake {
	f := &fake{t: t, version: -1, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.release) }) // before Close, which waits for the handlers
	return f
}

func (f *fake) set(mode string) {
	f.mu.Lock()
	f.mode = mode
	f.mu.Unlock()
}

// complete is the fake model's completion of p.
func complete(p []int32, seed uint64, maxNew int) ([]int32, []float64) {
	s := int64(0)
	for _, x := range p {
		s += int64(x)
	}
	var ids []int32
	var lps []float64
	for j := range maxNew {
		id := int32((s + int64(seed%1000) + int64(j)*7) % vocab)
		ids, lps = append(ids, id), append(lps, -float64(id+1)/100)
		if id == stop {
			break
		}
	}
	return ids, lps
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	mode, version := f.mode, f.version
	f.calls++
	f.mu.Unlock()
	switch r.URL.Path {
	case "/health":
		if mode == "500" {
			w.WriteHeader(500)
		}
		return
	case "/update_weights_from_disk":
		var u updateRequest
		if err := json.NewDecoder(r.Body).Decode(&u); err != nil || mode == "500" {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"success": false, "message": "bad"}`)
			return
		}
		f.mu.Lock()
		f.loaded = append(f.loaded, u.ModelPath)
		fmt.Sscan(u.WeightVersion, &f.version)
		f.mu.Unlock()
		fmt.Fprint(w, `{"success": true, "message": "ok"}`)
		return
	}
	switch mode {
	case "sleep":
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	case "500":
		http.Error(w, "internal error", 500)
		return
	case "garbage":
		fmt.Fprint(w, `{"text": "not what you asked for"`)
		return
	}
	if r.URL.Path == "/v1/completions" {
		var q openaiRequest
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		type lp struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float64 `json:"token_logprobs"`
		}
		type choice struct {
			Index        int    `json:"index"`
			Logprobs     lp     `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
		}
		var cs []choice
		for i, p := range q.Prompt {
			ids, lps := complete(p, q.Seed, q.MaxTokens)
			c := choice{Index: i, Logprobs: lp{TokenLogprobs: lps}, FinishReason: "length"}
			for _, id := range ids {
				c.Logprobs.Tokens = append(c.Logprobs.Tokens, fmt.Sprintf("token_id:%d", id))
			}
			cs = append([]choice{c}, cs...) // reversed: the client must order by index
		}
		ans := map[string]any{"choices": cs}
		if version >= 0 {
			ans["weight_version"] = version
		}
		json.NewEncoder(w).Encode(ans)
		return
	}
	var q sglangRequest
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	var out []map[string]any
	for _, p := range q.InputIDs {
		ids, lps := complete(p, q.SamplingParams.Seed, q.SamplingParams.MaxNewTokens)
		switch mode {
		case "nan":
			lps[0] = math.NaN()
		case "badid":
			ids[0] = vocab + 3
		case "short":
			if ids[len(ids)-1] != stop && len(ids) > 1 {
				ids, lps = ids[:1], lps[:1]
			}
		}
		trip := make([][]any, len(ids))
		for j := range ids {
			trip[j] = []any{lps[j], ids[j], nil}
			if mode == "nan" && j == 0 {
				trip[j][0] = "NaN"
			}
		}
		meta := map[string]any{"output_token_logprobs": trip, "finish_reason": map[string]any{"type": "length"}}
		if version >= 0 {
			meta["weight_version"] = fmt.Sprint(version)
		}
		out = append(out, map[string]any{"output_ids": ids, "meta_info": meta})
	}
	if mode == "count" {
		out = out[:len(out)-1]
	}
	json.NewEncoder(w).Encode(out)
}

func opts() runtime.SampleOptions {
	return runtime.SampleOptions{MaxNewTokens: 6, Temperature: 1, StopTokens: []int32{stop}, Seed: 11}
}

func prompts(n int) [][]int32 {
	var ps [][]int32
	for i := range n {
		ps = append(ps, []int32{1, int32(i), int32(3 * i)})
	}
	return ps
}

// checkRows requires row i to be the fake model's completion of ps[i] with seed.
func checkRows(t *testing.T, ps [][]int32, got []runtime.Sample, seed func(i int) uint64) {
	t.Helper()
	if len(got) != len(ps) {
		t.Fatalf("%d samples for %d prompts", len(got), len(ps))
	}
	for i, p := range ps {
		ids, lps := complete(p, seed(i), opts().MaxNewTokens)
		if fmt.Sprint(got[i].Tokens) != fmt.Sprint(ids) {
			t.Fatalf("row %d: tokens %v, want %v", i, got[i].Tokens, ids)
		}
		for j := range lps {
			if math.Abs(float64(got[i].LogProbs[j])-lps[j]) > 1e-7 {
				t.Fatalf("row %d token %d: log-prob %g, want %g", i, j, got[i].LogProbs[j], lps[j])
			}
		}
		if want := ids[len(ids)-1] == stop; got[i].Stopped != want {
			t.Fatalf("row %d: stopped %v, want %v", i, got[i].Stopped, want)
		}
	}
}

func newClient(t *testing.T, cfg Config, fs ...*fake) *Client {
	t.Helper()
	for _, f := range fs {
		cfg.Servers = append(cfg.Servers, f.srv.URL)
	}
	if cfg.Engine == "" {
		cfg.Engine = SGLang
	}
	cfg.Vocab = vocab
	if cfg.Timeout == 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWholeBatchGoesToOneServerWithTheSeed(t *testing.T) {
	for _, engine := range []string{SGLang, OpenAI} {
		t.Run(engine, func(t *testing.T) {
			a, b := newFake(t), newFake(t)
			c := newClient(t, Config{Engine: engine}, a, b)
			ps := prompts(7)
			for range 2 { // two batches: one per server in turn
				got, err := c.Generate(ps, opts())
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, ps, got, func(int) uint64 { return opts().Seed })
			}
			if a.calls != 1 || b.calls != 1 {
				t.Fatalf("calls %d and %d, want one batch each", a.calls, b.calls)
			}
		})
	}
}

func TestShardsKeepRowOrder(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{ShardRows: 3}, a, b)
	ps := prompts(10)
	got, err := c.Generate(ps, opts())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, ps, got, func(i int) uint64 { return shardSeed(opts().Seed, i/3) })
	if a.calls != 2 || b.calls != 2 {
		t.Fatalf("calls %d and %d, want the 4 shards spread 2 and 2", a.calls, b.calls)
	}
	m := c.Metrics()
	if m["remote/requests"] != 4 || m["remote/rows"] != 10 || m["remote/server0/requests"] != 2 || m["remote/retries"] != 0 {
		t.Fatalf("metrics %v", m)
	}
	if m := c.Metrics(); m["remote/requests"] != 0 {
		t.Fatalf("metrics not reset: %v", m)
	}
}

// TestFailedServerIsSkipped: whatever is wrong with one server's answer, every shard ends
// on the other one with the right rows, and the failures are counted and recorded.
func TestFailedServerIsSkipped(t *testing.T) {
	for _, mode := range []string{"dead", "sleep", "500", "garbage", "nan", "badid", "short", "count", "stale"} {
		t.Run(mode, func(t *testing.T) {
			bad, good := newFake(t), newFake(t)
			c := newClient(t, Config{ShardRows: 2, Timeout: 200 * time.Millisecond}, bad, good)
			switch mode {
			case "dead":
				bad.srv.Close()
			case "stale":
				bad.version, good.version = 1, 2
				c.SetMinVersion(2)
			default:
				bad.set(mode)
			}
			ps := prompts(6)
			got, err := c.Generate(ps, opts())
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, ps, got, func(i int) uint64 { return shardSeed(opts().Seed, i/2) })
			m := c.Metrics()
			// 3 concurrent shards start on a, b, a: those on a fail once each, then b answers
			// (the second may find a already marked failed and start on b).
			if f := m["remote/failures"]; f < 1 || f > 2 || m["remote/retries"] != f || m["remote/server1/rows"] != 6 {
				t.Fatalf("metrics %v", m)
			}
			if mode == "stale" && m["remote/stale_refused"] < 1 {
				t.Fatalf("stale answer not counted: %v", m)
			}
			ev := c.TakeEvents()
			if len(ev) == 0 || ev[0].Type != "remote_retry" || ev[0].Server != bad.srv.URL || ev[0].Err == "" {
				t.Fatalf("events %+v", ev)
			}
		})
	}
}

func TestNoValidAnswerFailsWithEveryReason(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.set("garbage")
	b.set("badid")
	c := newClient(t, Config{Attempts: 3}, a, b)
	_, err := c.Generate(prompts(2), opts())
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"no valid answer in 3 attempts", "not a /generate response", "outside the vocabulary"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
}

func TestUpdateWeightsAndCatchUp(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{}, a, b)
	b.set("500")
	if err := c.UpdateWeights("/w/1", 1); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a.loaded) != "[/w/1]" || len(b.loaded) != 0 || a.version != 1 {
		t.Fatalf("loaded %v %v", a.loaded, b.loaded)
	}
	ev := c.TakeEvents()
	if len(ev) != 2 || ev[0].Type != "remote_update_failed" || ev[1].Type != "remote_update" || ev[1].Attempt != 1 {
		t.Fatalf("events %+v", ev)
	}
	// b is back: before it samples, it loads the weights it missed.
	b.set("")
	a.set("garbage") // the request goes to b
	c.SetMinVersion(1)
	if _, err := c.Generate(prompts(3), opts()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(b.loaded) != "[/w/1]" || b.version != 1 {
		t.Fatalf("b did not catch up: %v", b.loaded)
	}
	a.set("500")
	b.set("500")
	if err := c.UpdateWeights("/w/2", 2); err == nil || !strings.Contains(err.Error(), "no server loaded weight version 2") {
		t.Fatalf("error %v", err)
	}
}

func TestHealth(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{}, a, b)
	b.set("500")
	down, err := c.Health()
	if err != nil || len(down) != 1 || !strings.Contains(down[0], b.srv.URL) {
		t.Fatalf("down %v, err %v", down, err)
	}
	a.set("500")
	if _, err := c.Health(); err == nil {
		t.Fatal("no error with every server down")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Engine: "tgi", Servers: []string{"http://a"}, Vocab: 3}, `rollout engine "tgi"`},
		{Config{Engine: SGLang, Vocab: 3}, "no servers"},
		{Config{Engine: SGLang, Servers: []string{"localhost:3000"}, Vocab: 3}, "want an http:// or https:// URL"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
