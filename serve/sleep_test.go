package serve

import (
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/tokenizer"
)

// TestSleepWake: a server woken after releasing its memory samples what it sampled before:
// on the weights it kept (level 1), on the weights reloaded from the starting model (level
// 2, SGLang's default) and, after a weight update while asleep, on the update's weights with
// its version. Without a way to reload them, the weights cannot be released.
func TestSleepWake(t *testing.T) {
	reloads := 0
	s, ts := tinyServer(t, func(o *Options) {
		o.Reload = func() (*runtime.Model, error) { reloads++; return runtime.OpenModel("tiny", 1) }
	})
	const maxNew = 8
	opt := runtime.SampleOptions{MaxNewTokens: maxNew, StopTokens: []int32{tokenizer.ByteEOS}}
	before := reference(t, tinyModel(t, 1), testPrompts[:1], opt)[0]
	other := tinyModel(t, 2)
	after := reference(t, other, testPrompts[:1], opt)[0]
	if slices.Equal(before.LogProbs, after.LogProbs) {
		t.Fatal("the two models' log-probs are equal: the test cannot tell them apart")
	}
	check := func(label, version string, want runtime.Sample) {
		t.Helper()
		var g genOut
		post(t, ts.URL, "/generate", greedyRequest(testPrompts[0], maxNew), &g)
		if g.MetaInfo.WeightVersion != version || !slices.Equal(g.OutputIDs, want.Tokens) || !sameLogprobs(g.logprobs(t), want.LogProbs) {
			t.Errorf("%s: version %s %v %v, want %s %v %v", label, g.MetaInfo.WeightVersion, g.OutputIDs, g.logprobs(t), version, want.Tokens, want.LogProbs)
		}
	}
	asleep := func(label string, want bool) {
		t.Helper()
		status, body := do(t, ts.URL, "POST", "/generate", []byte(`{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}`))
		if got := status == 503 && strings.Contains(string(body), "asleep"); got != want || s.Sleeping() != want {
			t.Errorf("%s: generate answered %d %s, Sleeping %v; want asleep %v", label, status, body, s.Sleeping(), want)
		}
	}
	check("start", "0", before)

	for _, c := range []struct {
		sleep, wake string
		reloads     int
	}{
		{"/sleep?level=1", "/wake_up", 0},
		{"/release_memory_occupation", "/resume_memory_occupation", 1},
		{"/sleep?level=2", "/wake_up?tags=weights&tags=kv_cache", 2},
	} {
		if status, body := do(t, ts.URL, "POST", c.sleep, nil); status != 200 {
			t.Fatalf("%s: %d %s", c.sleep, status, body)
		}
		asleep(c.sleep, true)
		if status, body := do(t, ts.URL, "POST", c.wake, nil); status != 200 {
			t.Fatalf("%s: %d %s", c.wake, status, body)
		}
		asleep(c.wake, false)
		check("after "+c.sleep+" and "+c.wake, "0", before)
		if reloads != c.reloads {
			t.Errorf("after %s: %d reloads of the weights, want %d", c.sleep, reloads, c.reloads)
		}
	}

	// An update while asleep is recorded (its config checked) and loaded when waking up.
	dir := t.TempDir()
	if err := other.SaveHF(dir, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sleep(false); err != nil {
		t.Fatal(err)
	}
	if status, body := do(t, ts.URL, "POST", "/update_weights_from_disk", []byte(`{"model_path": "`+t.TempDir()+`"}`)); status != 400 {
		t.Errorf("update from an empty directory while asleep: %d %s", status, body)
	}
	var u updateWeightsResponse
	post(t, ts.URL, "/update_weights_from_disk", map[string]any{"model_path": dir}, &u)
	if !u.Success || s.WeightVersion() != "1" {
		t.Fatalf("update while asleep: %+v, version %s", u, s.WeightVersion())
	}
	asleep("after an update while asleep", true)
	if err := s.WakeUp(); err != nil {
		t.Fatal(err)
	}
	check("woken after an update", "1", after)
	// Released and reloaded again: the update's weights, not the starting ones.
	if err := s.Sleep(false); err != nil {
		t.Fatal(err)
	}
	if err := s.WakeUp(); err != nil {
		t.Fatal(err)
	}
	check("released after an update", "1", after)
	if reloads != 2 {
		t.Errorf("%d reloads of the starting weights, want 2", reloads)
	}

	// No source for the starting weights: only the KV cache can be released.
	_, ts2 := tinyServer(t, nil)
	status, body := do(t, ts2.URL, "POST", "/sleep?level=2", nil)
	if status != 400 || !strings.Contains(string(body), "cannot be reloaded") {
		t.Errorf("level 2 without a source: %d %s", status, body)
	}
	if status, body := do(t, ts2.URL, "POST", "/release_memory_occupation", []byte(`{"tags": ["kv_cache"]}`)); status != 200 {
		t.Errorf("kv_cache without a source: %d %s", status, body)
	}
}
