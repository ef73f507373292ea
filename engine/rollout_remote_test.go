package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/runtime"
)

// loopServer is an inference server on loopback for the engine's tests: SGLang's
// /generate over runtime.Sampler with the model it was last told to load
// (/update_weights_from_disk), honouring sampling_seed and reporting the weight version, so
// that it samples exactly what the in-process sampler samples. fail says how its n'th
// generate request (1-based) fails: "" (it does not), "garbage", "sleep", "dead".
type loopServer struct {
	t        *testing.T
	backend  *runtime.Backend
	srv      *httptest.Server
	fail     func(n int) string
	mu       sync.Mutex
	sampler  *runtime.Sampler
	version  string
	versions []string // every version it loaded, in order
	calls    int      // generate requests
	release  chan struct{}
}

func newLoopServer(t *testing.T, fail func(int) string) *loopServer {
	be, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	s := &loopServer{t: t, backend: be, fail: fail, release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { close(s.release) })
	return s
}

func (s *loopServer) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/update_weights_from_disk":
		var q struct {
			ModelPath     string `json:"model_path"`
			WeightVersion string `json:"weight_version"`
		}
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		m, err := runtime.LoadModel(q.ModelPath)
		if err == nil {
			s.mu.Lock()
			s.sampler, err = runtime.NewSampler(s.backend, m)
			s.version = q.WeightVersion
			s.versions = append(s.versions, q.WeightVersion)
			s.mu.Unlock()
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprint(w, `{"success": true, "message": "loaded"}`)
		return
	case "/generate":
	default:
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.calls++
	mode := ""
	if s.fail != nil {
		mode = s.fail(s.calls)
	}
	sampler, version := s.sampler, s.version
	s.mu.Unlock()
	switch mode {
	case "garbage":
		fmt.Fprint(w, `[{"output_ids": [1, 2], "meta_info": {}}]`)
		return
	case "sleep":
		<-s.release
		return
	case "dead":
		s.srv.CloseClientConnections()
		return
	}
	var q struct {
		InputIDs       [][]int32 `json:"input_ids"`
		SamplingParams struct {
			MaxNewTokens int     `json:"max_new_tokens"`
			Temperature  float64 `json:"temperature"`
			TopP         float64 `json:"top_p"`
			TopK         int     `json:"top_k"`
			StopTokenIDs []int32 `json:"stop_token_ids"`
			Seed         uint64  `json:"sampling_seed"`
		} `json:"sampling_params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil || sampler == nil {
		http.Error(w, fmt.Sprintf("bad request (or no weights loaded): %v", err), 400)
		return
	}
	p := q.SamplingParams
	o := runtime.SampleOptions{MaxNewTokens: p.MaxNewTokens, Temperature: p.Temperature, TopP: p.TopP,
		TopK: max(p.TopK, 0), StopTokens: p.StopTokenIDs, Seed: p.Seed}
	if o.TopP == 1 {
		o.TopP = 0
	}
	samples, err := sampler.Generate(q.InputIDs, o)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	var out []map[string]any
	for _, smp := range samples {
		trip := make([][]any, len(smp.Tokens))
		for j, id := range smp.Tokens {
			trip[j] = []any{smp.LogProbs[j], id, nil}
		}
		out = append(out, map[string]any{"output_ids": smp.Tokens, "meta_info": map[string]any{
			"output_token_logprobs": trip, "weight_version": version, "finish_reason": map[string]string{"type": "length"}}})
	}
	json.NewEncoder(w).Encode(out)
}

// remoteSets are the --set values of a GRPO run against servers.
func remoteSets(servers ...*loopServer) []string {
	var urls []string
	for _, s := range servers {
		urls = append(urls, strconv.Quote(s.srv.URL))
	}
	return []string{`rollout.engine="sglang"`, "rollout.servers=[" + strings.Join(urls, ",") + "]", "rollout.timeout_s=20"}
}

// withoutRemote drops the metrics only a run with a rollout engine has.
func withoutRemote(recs []map[string]any) []map[string]any {
	for _, r := range recs {
		for k := range r {
			if strings.HasPrefix(k, "remote/") || k == "rollout/weight_version" {
				delete(r, k)
			}
		}
	}
	return recs
}

// TestRemoteRolloutsEqualInProcess: a GRPO run whose rollouts two loopback servers sample
// (max_staleness 0, whole batches, the seed passed on) has the metrics of the in-process run,
// record for record, also when a server answers garbage, hangs past the timeout or drops
// the connection mid-run: the batch is asked of the other server with the same seed. The
// servers load every version of the weights, in order, and the faults are warnings in
// events.jsonl.
func TestRemoteRolloutsEqualInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("three GRPO runs")
	}
	sets := []string{"knobs.num_rollout=3", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=6", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4"}
	local, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	want := comparable(metrics(t, local.Dir))
	for _, fault := range []string{"", "garbage", "sleep", "dead"} {
		t.Run("fault="+fault, func(t *testing.T) {
			// Server a fails its second request; b always answers.
			a := newLoopServer(t, func(n int) string {
				if n == 2 {
					return fault
				}
				return ""
			})
			b := newLoopServer(t, nil)
			s := append(append([]string{}, sets...), remoteSets(a, b)...)
			if fault == "sleep" {
				s = append(s, "rollout.timeout_s=1")
			}
			res, err := Run(context.Background(), runCatalog(t, "grpo", s...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
			if err != nil {
				t.Fatal(err)
			}
			recs := metrics(t, res.Dir)
			got := comparable(withoutRemote(recs))
			if len(got) != len(want) {
				t.Fatalf("%d records, want %d", len(got), len(want))
			}
			for i := range want {
				for k, v := range want[i] {
					if got[i][k] != v {
						t.Errorf("record %d %s: remote %v, in-process %v", i, k, got[i][k], v)
					}
				}
			}
			// Version 0 before the first rollout, then one per rollout's training.
			for _, srv := range []*loopServer{a, b} {
				if fmt.Sprint(srv.versions) != "[0 1 2 3]" {
					t.Errorf("server loaded versions %v, want [0 1 2 3]", srv.versions)
				}
			}
			tr := trainRecords(metrics(t, res.Dir)) // withoutRemote dropped the version from recs
			last := tr[len(tr)-1]
			if last["rollout/weight_version"] != 2.0 {
				t.Errorf("last rollout sampled with version %v, want 2", last["rollout/weight_version"])
			}
			warned := eventsOf(t, res.Dir, rundir.EventWarning)
			if fault == "" && len(warned) > 0 || fault != "" && (len(warned) != 1 || !strings.Contains(warned[0].Message, a.srv.URL)) {
				t.Errorf("warnings %+v", warned)
			}
			if _, err := os.Stat(filepath.Join(res.Dir, "rollout_weights", "v3", "model.safetensors")); err != nil {
				t.Errorf("the last synced weights: %v", err)
			}
		})
	}
}

// TestRemoteRolloutsWithTIS: with tis_cap, the trainer's own log-probs before the step
// (old_logp) and the server's log-probs of the same weights agree, so the truncated
// importance-sampling weights are 1 up to rounding and nothing is truncated.
func TestRemoteRolloutsWithTIS(t *testing.T) {
	if testing.Short() {
		t.Skip("a GRPO run")
	}
	srv := newLoopServer(t, nil)
	sets := append([]string{"knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=6", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4", "knobs.tis_cap=2"},
		remoteSets(srv)...)
	res, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, rec := range trainRecords(metrics(t, res.Dir)) {
		for k, v := range rec {
			f, _ := v.(float64)
			switch {
			case strings.HasSuffix(k, "tis_weight_mean"):
				seen++
				if math.Abs(f-1) > 1e-4 {
					t.Errorf("%s = %g, want 1", k, f)
				}
			case strings.HasSuffix(k, "tis_clipfrac") && f != 0, strings.HasSuffix(k, "tis_rollout_kl") && math.Abs(f) > 1e-4:
				t.Errorf("%s = %g, want 0", k, f)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no tis_weight_mean metric")
	}
}

// TestRemoteRolloutsFailWhenEveryServerFails: with both servers answering garbage, the
// rollout fails after its attempts and its retries, with an error that says why.
func TestRemoteRolloutsFailWhenEveryServerFails(t *testing.T) {
	if testing.Short() {
		t.Skip("a GRPO run")
	}
	bad := func(int) string { return "garbage" }
	a, b := newLoopServer(t, bad), newLoopServer(t, bad)
	sets := append([]string{"knobs.num_rollout=1", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=4", "knobs.eval_every=0", "task.validation_size=4", "knobs.rollout_retries=1"}, remoteSets(a, b)...)
	_, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err == nil || !strings.Contains(err.Error(), "no valid answer in 4 attempts") || !strings.Contains(err.Error(), "no meta_info.output_token_logprobs") {
		t.Fatalf("error %v", err)
	}
}

// TestWriteWeights: each version is a complete model directory under its final name (the
// temporary one gone), loadable with the weights written; pruning keeps the last two
// versions and removes what an interrupted write left.
func TestWriteWeights(t *testing.T) {
	m, err := runtime.OpenModel("tiny", 3)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".tmp-v9-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	for v := range 4 {
		dir, err := writeWeights(m, root, v)
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(dir) || filepath.Base(dir) != fmt.Sprintf("v%d", v) {
			t.Fatalf("version %d written to %s", v, dir)
		}
		pruneWeights(root, v)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[v2 v3]" {
		t.Fatalf("left %v, want [v2 v3]", names)
	}
	back, err := runtime.LoadModel(filepath.Join(root, "v3"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	b, err := back.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d tensors written, %d read", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Data, b[i].Data) {
			t.Fatalf("tensor %s differs after the round trip", a[i].Name)
		}
	}
}
