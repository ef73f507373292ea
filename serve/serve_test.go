package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/chat"
	"stx.dev/stx/runtime/tokenizer"
)

var (
	backendOnce sync.Once
	backend     *runtime.Backend
	backendErr  error
)

func testBackend(t testing.TB) *runtime.Backend {
	t.Helper()
	backendOnce.Do(func() { backend, backendErr = runtime.NewBackend("") })
	if backendErr != nil {
		t.Fatal(backendErr)
	}
	return backend
}

// chatTemplate is a minimal chat template: "<role>content\n" per turn, then "<assistant>".
const chatTemplate = `{% for m in messages %}<{{ m.role }}>{{ m.content }}
{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}`

func tinyModel(t testing.TB, seed uint64) *runtime.Model {
	t.Helper()
	m, err := runtime.OpenModel("tiny", seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tinyServer serves the tiny model (seed 1) with the byte tokenizer and chatTemplate.
func tinyServer(t testing.TB, mutate func(*Options)) (*Server, *httptest.Server) {
	t.Helper()
	tmpl, err := chat.Parse(chatTemplate, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := tokenizer.NewByte()
	opt := Options{Backend: testBackend(t), Model: tinyModel(t, 1), ModelPath: "tiny", Tokenizer: tok, TokenizerPath: "byte",
		Template: tmpl, StopTokens: tok.StopTokens(), MaxBatch: 8}
	if mutate != nil {
		mutate(&opt)
	}
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts
}

// post sends a JSON body and decodes the 200 response into out.
func post(t testing.TB, base, path string, body any, out any) {
	t.Helper()
	js, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	status, got := do(t, base, "POST", path, js)
	if status != 200 {
		t.Fatalf("%s: status %d: %s", path, status, got)
	}
	if err := json.Unmarshal(got, out); err != nil {
		t.Fatalf("%s: %v: %s", path, err, got)
	}
}

type genOut struct {
	Text      *string `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		ID                  string            `json:"id"`
		FinishReason        map[string]any    `json:"finish_reason"`
		WeightVersion       string            `json:"weight_version"`
		OutputTokenLogprobs []json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

// logprobs reads the log-probs of output_token_logprobs, checking each triple's id.
func (g genOut) logprobs(t testing.TB) []float32 {
	t.Helper()
	if len(g.MetaInfo.OutputTokenLogprobs) != len(g.OutputIDs) {
		t.Fatalf("%d log-probs for %d output ids", len(g.MetaInfo.OutputTokenLogprobs), len(g.OutputIDs))
	}
	out := make([]float32, len(g.OutputIDs))
	for i, raw := range g.MetaInfo.OutputTokenLogprobs {
		var triple []any
		if err := json.Unmarshal(raw, &triple); err != nil || len(triple) != 3 {
			t.Fatalf("log-prob entry %s is not a triple", raw)
		}
		if id, _ := triple[1].(float64); int32(id) != g.OutputIDs[i] {
			t.Fatalf("log-prob entry %d names token %v, output_ids has %d", i, triple[1], g.OutputIDs[i])
		}
		lp, _ := triple[0].(float64)
		out[i] = float32(lp)
	}
	return out
}

// referenceBatch is Sampler.Generate's samples of prompts in one call, as stx run draws a rollout.
func referenceBatch(t testing.TB, m *runtime.Model, prompts [][]int32, opt runtime.SampleOptions) []runtime.Sample {
	t.Helper()
	sm, err := runtime.NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sm.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func greedyRequest(prompt []int32, maxNew int) map[string]any {
	return map[string]any{"input_ids": prompt, "return_logprob": true,
		"sampling_params": map[string]any{"max_new_tokens": maxNew, "temperature": 0}}
}

// reference is what runtime.Sampler.Generate samples for each prompt alone.
func reference(t testing.TB, m *runtime.Model, prompts [][]int32, opt runtime.SampleOptions) []runtime.Sample {
	t.Helper()
	sm, err := runtime.NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]runtime.Sample, len(prompts))
	for i, p := range prompts {
		s, err := sm.Generate([][]int32{p}, opt)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s[0]
	}
	return out
}

// sameLogprobs compares log-probs: bit for bit where the sampler decodes on the host (each row
// computed alone whatever the batch), within 1e-5 on XLA, whose batched graphs may round
// differently from one row's.
func sameLogprobs(a, b []float32) bool {
	if runtime.EnvBackendKind() != "xla" {
		return slices.Equal(a, b)
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5 {
			return false
		}
	}
	return true
}

var testPrompts = [][]int32{{257, 49, 50, 43, 55, 61}, {257, 51, 42, 51, 61}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {100}}

// TestGreedyEqualsSampler: concurrent greedy /generate requests, batched by the server, return
// the tokens and log-probs Sampler.Generate returns for each prompt alone.
func TestGreedyEqualsSampler(t *testing.T) {
	_, ts := tinyServer(t, nil)
	const maxNew = 12
	want := reference(t, tinyModel(t, 1), testPrompts, runtime.SampleOptions{MaxNewTokens: maxNew, StopTokens: []int32{tokenizer.ByteEOS}})
	got := make([]genOut, len(testPrompts))
	var wg sync.WaitGroup
	for i, p := range testPrompts {
		wg.Go(func() { post(t, ts.URL, "/generate", greedyRequest(p, maxNew), &got[i]) })
	}
	wg.Wait()
	for i := range testPrompts {
		if !slices.Equal(got[i].OutputIDs, want[i].Tokens) {
			t.Errorf("prompt %d: output_ids %v, Sampler.Generate %v", i, got[i].OutputIDs, want[i].Tokens)
		}
		if !sameLogprobs(got[i].logprobs(t), want[i].LogProbs) {
			t.Errorf("prompt %d: log-probs %v, Sampler.Generate %v", i, got[i].logprobs(t), want[i].LogProbs)
		}
	}
}

// TestConcurrentMixed sends many requests to every endpoint at once (run with -race): each
// greedy answer is the same as alone.
func TestConcurrentMixed(t *testing.T) {
	_, ts := tinyServer(t, func(o *Options) { o.MaxBatch = 3 })
	var alone genOut
	post(t, ts.URL, "/generate", greedyRequest(testPrompts[0], 6), &alone)
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			switch i % 4 {
			case 0:
				var g genOut
				post(t, ts.URL, "/generate", greedyRequest(testPrompts[0], 6), &g)
				if !slices.Equal(g.OutputIDs, alone.OutputIDs) {
					t.Errorf("request %d: %v, alone %v", i, g.OutputIDs, alone.OutputIDs)
				}
			case 1:
				var g []genOut
				post(t, ts.URL, "/generate", map[string]any{"input_ids": testPrompts[1],
					"sampling_params": map[string]any{"max_new_tokens": 4, "n": 3, "sampling_seed": i}}, &g)
				if len(g) != 3 {
					t.Errorf("request %d: %d samples, want 3", i, len(g))
				}
			case 2:
				var c completionResponse
				post(t, ts.URL, "/v1/completions", map[string]any{"prompt": "2+2=", "max_tokens": 5, "logprobs": 0}, &c)
				if len(c.Choices) != 1 || len(c.Choices[0].Logprobs.TokenLogprobs) == 0 {
					t.Errorf("request %d: %+v", i, c)
				}
			case 3:
				var c chatResponse
				post(t, ts.URL, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}},
					"max_tokens": 4, "logprobs": true}, &c)
				if len(c.Choices) != 1 || c.Choices[0].Logprobs == nil {
					t.Errorf("request %d: %+v", i, c)
				}
			}
		})
	}
	wg.Wait()
}

// TestSeedsAndN: the n samples of one request differ; a seeded request gives the same samples
// again; a seeded request is one batch of Sampler.Generate with its seed over its rows
// (prompt-major, n each), which is what stx run's in-process sampler draws for the same rows, so
// a run's rollouts from stx serve equal its own (oneSeededBatch).
func TestSeedsAndN(t *testing.T) {
	_, ts := tinyServer(t, nil)
	opt := func(seed uint64) runtime.SampleOptions {
		return runtime.SampleOptions{MaxNewTokens: 8, Temperature: 1, TopP: 1, StopTokens: []int32{tokenizer.ByteEOS}, Seed: seed}
	}
	req := map[string]any{"input_ids": testPrompts[2], "sampling_params": map[string]any{"max_new_tokens": 8, "n": 4, "sampling_seed": 5}}
	var a []genOut
	post(t, ts.URL, "/generate", req, &a)
	distinct := map[string]bool{}
	for i := range a {
		distinct[fmt.Sprint(a[i].OutputIDs)] = true
	}
	if len(a) != 4 || len(distinct) < 2 {
		t.Errorf("the samples of one request: %d, %d distinct", len(a), len(distinct))
	}
	four := [][]int32{testPrompts[2], testPrompts[2], testPrompts[2], testPrompts[2]}
	for j, want := range referenceBatch(t, tinyModel(t, 1), four, opt(5)) {
		if !slices.Equal(a[j].OutputIDs, want.Tokens) {
			t.Errorf("sample %d: %v, row %d of Sampler.Generate with seed 5: %v", j, a[j].OutputIDs, j, want.Tokens)
		}
	}
	one := map[string]any{"input_ids": testPrompts[2], "sampling_params": map[string]any{"max_new_tokens": 8, "sampling_seed": 9}}
	var b, c genOut
	post(t, ts.URL, "/generate", one, &b)
	post(t, ts.URL, "/generate", one, &c)
	if !slices.Equal(b.OutputIDs, c.OutputIDs) {
		t.Errorf("seed 9: %v then %v", b.OutputIDs, c.OutputIDs)
	}
	// A group of rollouts sent as one prompt repeated, n 1 each, with one seed, as stx run sends
	// them: the rows of Sampler.Generate over the same rows and seed.
	group := [][]int32{testPrompts[1], testPrompts[1], testPrompts[3], testPrompts[1]}
	var rows []genOut
	post(t, ts.URL, "/generate", map[string]any{"input_ids": group, "sampling_params": map[string]any{"max_new_tokens": 8, "sampling_seed": 100}}, &rows)
	for k, want := range referenceBatch(t, tinyModel(t, 1), group, opt(100)) {
		if !slices.Equal(rows[k].OutputIDs, want.Tokens) {
			t.Errorf("row %d: %v, Sampler.Generate with seed 100: %v", k, rows[k].OutputIDs, want.Tokens)
		}
	}
	if slices.Equal(rows[0].OutputIDs, rows[1].OutputIDs) && slices.Equal(rows[1].OutputIDs, rows[3].OutputIDs) {
		t.Errorf("the repeated prompt's rows are all %v", rows[0].OutputIDs)
	}
}

// TestQueue: serve's own queue (the generator on XLA) batches concurrent calls through
// Sampler.Generate; greedy samples are each prompt's alone, and a cancelled call leaves.
func TestQueue(t *testing.T) {
	m := tinyModel(t, 1)
	sm, err := runtime.NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{s: sm, maxRows: 2}
	defer q.Close()
	opt := runtime.SampleOptions{MaxNewTokens: 6, StopTokens: []int32{tokenizer.ByteEOS}}
	want := reference(t, m, testPrompts, opt)
	got := make([]runtime.Sample, len(testPrompts))
	var wg sync.WaitGroup
	for round := range 3 {
		for i, p := range testPrompts {
			wg.Go(func() {
				o := opt
				o.Seed = uint64(round*10 + i) // the seed does not split batches
				s, err := q.Generate(context.Background(), p, o)
				if err != nil {
					t.Error(err)
				}
				got[i] = s
			})
		}
		wg.Wait()
		for i := range want {
			if !slices.Equal(got[i].Tokens, want[i].Tokens) || !sameLogprobs(got[i].LogProbs, want[i].LogProbs) {
				t.Errorf("round %d prompt %d: %v, alone %v", round, i, got[i].Tokens, want[i].Tokens)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Generate(ctx, testPrompts[0], opt); err == nil {
		t.Error("a cancelled call returned no error")
	}
	q.Close()
	if _, err := q.Generate(context.Background(), testPrompts[0], opt); err == nil {
		t.Error("a call after Close returned no error")
	}
	if !sameOptions(opt, runtime.SampleOptions{MaxNewTokens: 6, StopTokens: []int32{tokenizer.ByteEOS}, Seed: 3}) ||
		sameOptions(opt, runtime.SampleOptions{MaxNewTokens: 6, Temperature: 1, StopTokens: []int32{tokenizer.ByteEOS}}) {
		t.Error("sameOptions: the seed must not matter, the temperature must")
	}
}

// jsonText is s as a client reads it from JSON (invalid UTF-8 bytes become U+FFFD).
func jsonText(s string) string {
	js, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(js, &out)
	return out
}

// TestStops: stop_token_ids, the model's stop ids with and without ignore_eos, and stop
// strings end samples where the greedy continuation reaches them.
func TestStops(t *testing.T) {
	const maxNew = 16
	full := reference(t, tinyModel(t, 1), testPrompts[:1], runtime.SampleOptions{MaxNewTokens: maxNew})[0].Tokens
	stopAt := 3 // the 4th greedy token ends the sample
	stopID := full[stopAt]
	first := slices.Index(full, stopID)

	_, ts := tinyServer(t, nil)
	var g genOut
	post(t, ts.URL, "/generate", map[string]any{"input_ids": testPrompts[0], "return_logprob": true,
		"sampling_params": map[string]any{"max_new_tokens": maxNew, "temperature": 0, "stop_token_ids": []int32{stopID}}}, &g)
	if !slices.Equal(g.OutputIDs, full[:first+1]) || g.MetaInfo.FinishReason["type"] != "stop" || g.MetaInfo.FinishReason["matched"] != float64(stopID) {
		t.Errorf("stop_token_ids [%d]: %v %v, want %v", stopID, g.OutputIDs, g.MetaInfo.FinishReason, full[:first+1])
	}
	var c completionResponse
	post(t, ts.URL, "/v1/completions", map[string]any{"prompt": testPrompts[0], "max_tokens": maxNew, "temperature": 0,
		"stop_token_ids": []int32{stopID}, "return_token_ids": true}, &c)
	if ch := c.Choices[0]; !slices.Equal(ch.TokenIDs, full[:first+1]) || ch.FinishReason != "stop" || ch.StopReason != float64(stopID) {
		t.Errorf("completions stop_token_ids [%d]: %v %s %v", stopID, ch.TokenIDs, ch.FinishReason, ch.StopReason)
	}

	// The same id as one of the model's stop ids: finish "stop" with stop_reason null; ignored
	// with ignore_eos.
	_, ts2 := tinyServer(t, func(o *Options) { o.StopTokens = []int32{stopID} })
	post(t, ts2.URL, "/v1/completions", map[string]any{"prompt": testPrompts[0], "max_tokens": maxNew, "temperature": 0, "return_token_ids": true}, &c)
	if ch := c.Choices[0]; !slices.Equal(ch.TokenIDs, full[:first+1]) || ch.FinishReason != "stop" || ch.StopReason != nil {
		t.Errorf("model stop id %d: %v %s %v", stopID, ch.TokenIDs, ch.FinishReason, ch.StopReason)
	}
	post(t, ts2.URL, "/v1/completions", map[string]any{"prompt": testPrompts[0], "max_tokens": maxNew, "temperature": 0,
		"return_token_ids": true, "ignore_eos": true}, &c)
	if ch := c.Choices[0]; !slices.Equal(ch.TokenIDs, full) || ch.FinishReason != "length" {
		t.Errorf("ignore_eos: %v %s, want %v length", ch.TokenIDs, ch.FinishReason, full)
	}

	// A stop string: the first ASCII letter or digit of the continuation.
	k := slices.IndexFunc(full, func(id int32) bool {
		return (id >= '0' && id <= '9') || (id >= 'a' && id <= 'z') || (id >= 'A' && id <= 'Z')
	})
	if k < 0 {
		t.Skipf("the greedy continuation %v has no ASCII letter or digit to stop at", full)
	}
	stop := string(rune(full[k]))
	tok := tokenizer.NewByte()
	text := tok.Decode(full[:k+1])
	want := jsonText(text[:strings.Index(text, stop)])
	post(t, ts.URL, "/v1/completions", map[string]any{"prompt": testPrompts[0], "max_tokens": maxNew, "temperature": 0,
		"stop": stop, "return_token_ids": true}, &c)
	if ch := c.Choices[0]; !slices.Equal(ch.TokenIDs, full[:k+1]) || ch.Text != want || ch.StopReason != stop {
		t.Errorf("stop %q: %v %q %v, want %v %q", stop, ch.TokenIDs, ch.Text, ch.StopReason, full[:k+1], want)
	}
	post(t, ts.URL, "/generate", map[string]any{"input_ids": testPrompts[0],
		"sampling_params": map[string]any{"max_new_tokens": maxNew, "temperature": 0, "stop": []string{stop}}}, &g)
	if g.MetaInfo.FinishReason["matched"] != stop || len(g.OutputIDs) != k+1 {
		t.Errorf("generate stop %q: %v %v", stop, g.OutputIDs, g.MetaInfo.FinishReason)
	}
}

// TestUpdateWeights switches to another model's weights: versions, log-probs equal to a
// sampler on that model, and refused updates that keep the old weights.
func TestUpdateWeights(t *testing.T) {
	s, ts := tinyServer(t, nil)
	other := tinyModel(t, 2)
	dir := t.TempDir()
	if err := other.SaveHF(dir, 0); err != nil {
		t.Fatal(err)
	}
	const maxNew = 8
	opt := runtime.SampleOptions{MaxNewTokens: maxNew, StopTokens: []int32{tokenizer.ByteEOS}}
	before := reference(t, tinyModel(t, 1), testPrompts[:1], opt)[0]
	after := reference(t, other, testPrompts[:1], opt)[0]

	check := func(label, version string, want runtime.Sample) {
		t.Helper()
		var g genOut
		post(t, ts.URL, "/generate", greedyRequest(testPrompts[0], maxNew), &g)
		if g.MetaInfo.WeightVersion != version {
			t.Errorf("%s: weight_version %q, want %q", label, g.MetaInfo.WeightVersion, version)
		}
		if !slices.Equal(g.OutputIDs, want.Tokens) || !sameLogprobs(g.logprobs(t), want.LogProbs) {
			t.Errorf("%s: %v %v, want %v %v", label, g.OutputIDs, g.logprobs(t), want.Tokens, want.LogProbs)
		}
	}
	check("start", "0", before)

	var u updateWeightsResponse
	post(t, ts.URL, "/update_weights_from_disk", map[string]any{"model_path": dir}, &u)
	if !u.Success || !strings.Contains(u.Message, dir) {
		t.Fatalf("update: %+v", u)
	}
	check("after update", "1", after)
	if slices.Equal(before.LogProbs, after.LogProbs) {
		t.Fatal("the two models' log-probs are equal: the test cannot tell them apart")
	}

	// A bad directory and another architecture: 400, and the weights and version stay.
	wrong := t.TempDir()
	cfg := other.Config
	cfg.Layers = 1
	small, err := runtime.NewModel(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := small.SaveHF(wrong, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, msg string }{
		{t.TempDir(), "config.json"},
		{wrong, "num_hidden_layers"},
	} {
		status, body := do(t, ts.URL, "POST", "/update_weights_from_disk", []byte(fmt.Sprintf(`{"model_path": %q}`, c.dir)))
		if status != 400 || !strings.Contains(string(body), c.msg) || !strings.Contains(string(body), `"success":false`) {
			t.Errorf("update from %s: %d %s, want 400 naming %s", c.dir, status, body, c.msg)
		}
		check("after a refused update", "1", after)
	}

	// A given version is taken as it is; a non-integer one is kept by later updates without one.
	post(t, ts.URL, "/update_weights_from_disk", map[string]any{"model_path": dir, "weight_version": "step-7"}, &u)
	if got := s.WeightVersion(); got != "step-7" {
		t.Errorf("weight version %q, want step-7", got)
	}
	post(t, ts.URL, "/update_weights_from_disk", map[string]any{"model_path": dir}, &u)
	if got := s.WeightVersion(); got != "step-7" {
		t.Errorf("weight version %q after an update without one, want step-7 kept", got)
	}
	var info map[string]any
	status, body := do(t, ts.URL, "GET", "/get_model_info", nil)
	if err := json.Unmarshal(body, &info); err != nil || status != 200 || info["weight_version"] != "step-7" {
		t.Errorf("get_model_info: %d %s", status, body)
	}
}

// blockingGen holds every Generate call until release is closed.
type blockingGen struct {
	inner   generator
	started chan struct{}
	release chan struct{}
}

func (b *blockingGen) Generate(ctx context.Context, p []int32, o runtime.SampleOptions) (runtime.Sample, error) {
	b.started <- struct{}{}
	<-b.release
	return b.inner.Generate(ctx, p, o)
}

// TestUpdateWaitsForInFlight: an update waits for the request in flight, which gets the old
// weight version; the update then completes.
func TestUpdateWaitsForInFlight(t *testing.T) {
	s, ts := tinyServer(t, nil)
	dir := t.TempDir()
	if err := tinyModel(t, 2).SaveHF(dir, 0); err != nil {
		t.Fatal(err)
	}
	bg := &blockingGen{inner: s.eng.gen, started: make(chan struct{}, 1), release: make(chan struct{})}
	s.eng.gen = bg
	var inflight genOut
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, ts.URL, "/generate", greedyRequest(testPrompts[0], 4), &inflight)
	}()
	<-bg.started
	updated := make(chan string, 1)
	go func() {
		v, err := s.UpdateWeights(dir, "")
		if err != nil {
			t.Error(err)
		}
		updated <- v
	}()
	select {
	case v := <-updated:
		t.Fatalf("the update finished (version %s) while a request was in flight", v)
	case <-time.After(200 * time.Millisecond):
	}
	close(bg.release)
	<-done
	if v := <-updated; v != "1" {
		t.Errorf("version after the update %q, want 1", v)
	}
	if inflight.MetaInfo.WeightVersion != "0" {
		t.Errorf("the request in flight reports weight version %q, want 0", inflight.MetaInfo.WeightVersion)
	}
}

// TestStream: /generate with stream true sends one event with the result, then [DONE].
func TestStream(t *testing.T) {
	_, ts := tinyServer(t, nil)
	status, body := do(t, ts.URL, "POST", "/generate", []byte(`{"input_ids": [1, 2], "stream": true, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}`))
	parts := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	if status != 200 || len(parts) != 2 || !strings.HasPrefix(parts[0], "data: {") || parts[1] != "data: [DONE]" {
		t.Fatalf("stream: %d %q", status, body)
	}
	var g genOut
	if err := json.Unmarshal([]byte(strings.TrimPrefix(parts[0], "data: ")), &g); err != nil || len(g.OutputIDs) != 2 {
		t.Fatalf("stream event %q: %v", parts[0], err)
	}
}

// TestHealthWhileClosing: /health answers 503 once the server is stopping.
func TestHealthWhileClosing(t *testing.T) {
	s, ts := tinyServer(t, nil)
	if status, _ := do(t, ts.URL, "GET", "/health", nil); status != 200 {
		t.Fatalf("health %d", status)
	}
	s.SetClosing()
	if status, _ := do(t, ts.URL, "GET", "/health", nil); status != 503 {
		t.Fatalf("health while closing %d, want 503", status)
	}
}

// TestNoTokenizer: a model without tokenizer serves token ids (no text field) and refuses text.
func TestNoTokenizer(t *testing.T) {
	_, ts := tinyServer(t, func(o *Options) { o.Tokenizer, o.Template, o.TokenizerPath = nil, nil, "" })
	var g genOut
	post(t, ts.URL, "/generate", greedyRequest([]int32{1, 2}, 3), &g)
	if g.Text != nil || len(g.OutputIDs) == 0 {
		t.Errorf("no tokenizer: text %v, ids %v", g.Text, g.OutputIDs)
	}
	for _, c := range []struct{ path, body string }{
		{"/generate", `{"text": "hi"}`},
		{"/generate", `{"input_ids": [1], "sampling_params": {"stop": "x"}}`},
		{"/v1/completions", `{"prompt": "hi"}`},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`},
	} {
		if status, body := do(t, ts.URL, "POST", c.path, []byte(c.body)); status != 400 || !strings.Contains(string(body), "tokenizer") {
			t.Errorf("%s %s: %d %s", c.path, c.body, status, body)
		}
	}
}

// TestPromptLogprobs: SGLang's input_token_logprobs (logprob_start_len ≥ 0) and vLLM's
// prompt_logprobs are the scorer's log-probs of the prompt; and the output log-probs at
// temperature 1 are the model's log-probs of the completion (scored with the prompt).
func TestPromptLogprobs(t *testing.T) {
	_, ts := tinyServer(t, nil)
	m := tinyModel(t, 1)
	sc, err := runtime.NewScorer(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	prompt := testPrompts[0]
	var g struct {
		OutputIDs []int32 `json:"output_ids"`
		MetaInfo  struct {
			In  [][3]any `json:"input_token_logprobs"`
			Out [][3]any `json:"output_token_logprobs"`
		} `json:"meta_info"`
	}
	post(t, ts.URL, "/generate", map[string]any{"input_ids": prompt, "return_logprob": true, "logprob_start_len": 2,
		"sampling_params": map[string]any{"max_new_tokens": 6, "temperature": 1, "sampling_seed": 3}}, &g)
	scored, err := sc.Score([][]int32{append(slices.Clone(prompt), g.OutputIDs...)})
	if err != nil {
		t.Fatal(err)
	}
	lps := scored[0].LogProbs // lps[t] = log p(seq[t+1] | seq[≤t])
	if len(g.MetaInfo.In) != len(prompt)-2 {
		t.Fatalf("%d input log-probs from position 2 of a %d-token prompt", len(g.MetaInfo.In), len(prompt))
	}
	near := func(a any, b float32) bool { x, ok := a.(float64); return ok && math.Abs(x-float64(b)) < 1e-4 }
	for k, e := range g.MetaInfo.In {
		pos := 2 + k
		if e[1] != float64(prompt[pos]) || !near(e[0], lps[pos-1]) {
			t.Errorf("input_token_logprobs[%d] = %v, want [%v, %d, null]", k, e, lps[pos-1], prompt[pos])
		}
	}
	for k, e := range g.MetaInfo.Out {
		if !near(e[0], lps[len(prompt)-1+k]) {
			t.Errorf("output_token_logprobs[%d] = %v, the model's log-prob is %v", k, e[0], lps[len(prompt)-1+k])
		}
	}

	post(t, ts.URL, "/generate", map[string]any{"input_ids": prompt, "return_logprob": true, "logprob_start_len": 0,
		"sampling_params": map[string]any{"max_new_tokens": 1}}, &g)
	if len(g.MetaInfo.In) != len(prompt) || g.MetaInfo.In[0][0] != nil || !near(g.MetaInfo.In[1][0], lps[0]) {
		t.Errorf("logprob_start_len 0: %v", g.MetaInfo.In)
	}

	var c struct {
		Choices []struct {
			PromptLogprobs []map[string]struct {
				Logprob float64 `json:"logprob"`
			} `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	post(t, ts.URL, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0}, &c)
	pl := c.Choices[0].PromptLogprobs
	if len(pl) != len(prompt) || pl[0] != nil {
		t.Fatalf("prompt_logprobs %v", pl)
	}
	for k := 1; k < len(prompt); k++ {
		e, ok := pl[k][fmt.Sprint(prompt[k])]
		if !ok || len(pl[k]) != 1 || !near(e.Logprob, lps[k-1]) {
			t.Errorf("prompt_logprobs[%d] = %v, want {%d: %v}", k, pl[k], prompt[k], lps[k-1])
		}
	}
}

// TestUpdatesUnderLoad alternates two models' weights while greedy requests run (with -race):
// every answer's log-probs are those of the model its weight_version names, so no request
// mixes two versions.
func TestUpdatesUnderLoad(t *testing.T) {
	s, ts := tinyServer(t, func(o *Options) { o.MaxBatch = 4 })
	dirs := [2]string{t.TempDir(), t.TempDir()}
	var want [2]runtime.Sample
	opt := runtime.SampleOptions{MaxNewTokens: 6, StopTokens: []int32{tokenizer.ByteEOS}}
	for i, seed := range []uint64{1, 2} {
		m := tinyModel(t, seed)
		if err := m.SaveHF(dirs[i], 0); err != nil {
			t.Fatal(err)
		}
		want[i] = reference(t, m, testPrompts[:1], opt)[0]
	}
	if slices.Equal(want[0].LogProbs, want[1].LogProbs) {
		t.Fatal("the two models sample the same log-probs: the test cannot tell them apart")
	}
	stop := make(chan struct{})
	updates := make(chan int, 1)
	go func() {
		n := 0
		defer func() { updates <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n++
			if _, err := s.UpdateWeights(dirs[n%2], strconv.Itoa(n)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 8 {
				var g genOut
				post(t, ts.URL, "/generate", greedyRequest(testPrompts[0], 6), &g)
				v, err := strconv.Atoi(g.MetaInfo.WeightVersion)
				if err != nil {
					t.Errorf("weight_version %q", g.MetaInfo.WeightVersion)
					return
				}
				// Version 0 is the starting model (seed 1, like dirs[0]); version n the weights of dirs[n%2].
				if w := want[v%2]; !slices.Equal(g.OutputIDs, w.Tokens) || !sameLogprobs(g.logprobs(t), w.LogProbs) {
					t.Errorf("version %d: %v %v, want %v %v", v, g.OutputIDs, g.logprobs(t), w.Tokens, w.LogProbs)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("%d weight updates during 32 requests", <-updates)
}

// sseEvents splits a text/event-stream body into its data payloads, checking the [DONE] end.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	if len(parts) < 2 || parts[len(parts)-1] != "data: [DONE]" {
		t.Fatalf("not an event stream ending in [DONE]: %q", body)
	}
	var out []string
	for _, p := range parts[:len(parts)-1] {
		if !strings.HasPrefix(p, "data: {") {
			t.Fatalf("event %q", p)
		}
		out = append(out, strings.TrimPrefix(p, "data: "))
	}
	return out
}

// TestOpenAIStream: with stream true, completions come as one chunk per choice (whole text,
// finish reason), chat as a role chunk then a content chunk, then usage when asked for; the
// chunks carry what the whole response carries.
func TestOpenAIStream(t *testing.T) {
	_, ts := tinyServer(t, nil)
	var whole completionResponse
	post(t, ts.URL, "/v1/completions", map[string]any{"prompt": testPrompts[0], "max_tokens": 5, "temperature": 0, "n": 2, "logprobs": 0}, &whole)
	status, body := do(t, ts.URL, "POST", "/v1/completions", []byte(fmt.Sprintf(
		`{"prompt": %s, "max_tokens": 5, "temperature": 0, "n": 2, "logprobs": 0, "stream": true, "stream_options": {"include_usage": true}}`, jsonOf(testPrompts[0]))))
	events := sseEvents(t, body)
	if status != 200 || len(events) != 3 {
		t.Fatalf("completions stream: %d, %d events: %s", status, len(events), body)
	}
	for i := range 2 {
		var ch struct {
			Object  string                   `json:"object"`
			Choices []completionStreamChoice `json:"choices"`
		}
		if err := json.Unmarshal([]byte(events[i]), &ch); err != nil || ch.Object != "text_completion" || len(ch.Choices) != 1 {
			t.Fatalf("chunk %d: %v %s", i, err, events[i])
		}
		c := ch.Choices[0]
		if c.Index != i || c.Text != whole.Choices[i].Text || c.FinishReason != "length" ||
			!slices.Equal(c.Logprobs.TokenLogprobs, whole.Choices[i].Logprobs.TokenLogprobs) {
			t.Errorf("chunk %d: %+v, whole response's choice %+v", i, c, whole.Choices[i])
		}
	}
	var u struct {
		Choices []any     `json:"choices"`
		Usage   usageInfo `json:"usage"`
	}
	if err := json.Unmarshal([]byte(events[2]), &u); err != nil || len(u.Choices) != 0 || u.Usage != whole.Usage {
		t.Errorf("usage chunk %s, want %+v", events[2], whole.Usage)
	}

	status, body = do(t, ts.URL, "POST", "/v1/chat/completions",
		[]byte(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0, "logprobs": true, "stream": true}`))
	events = sseEvents(t, body)
	if status != 200 || len(events) != 2 {
		t.Fatalf("chat stream: %d, %d events: %s", status, len(events), body)
	}
	var first, second struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        map[string]any `json:"delta"`
			Logprobs     *chatContent   `json:"logprobs"`
			FinishReason *string        `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(events[0]), &first) != nil || json.Unmarshal([]byte(events[1]), &second) != nil {
		t.Fatalf("chat chunks %q", events)
	}
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta["role"] != "assistant" || first.Choices[0].FinishReason != nil {
		t.Errorf("first chat chunk %s", events[0])
	}
	if c := second.Choices[0]; c.FinishReason == nil || *c.FinishReason != "length" || c.Logprobs == nil || len(c.Logprobs.Content) != 3 {
		t.Errorf("second chat chunk %s", events[1])
	}
}

func jsonOf(v any) string {
	js, _ := json.Marshal(v)
	return string(js)
}
