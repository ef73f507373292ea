package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"

	"stx.dev/stx/schema"
)

type verlMessage struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

// verlRow is the layout of verl's preprocessed GSM8K Parquet files.
type verlRow struct {
	DataSource  string        `parquet:"data_source"`
	Prompt      []verlMessage `parquet:"prompt,list"`
	RewardModel struct {
		GroundTruth string `parquet:"ground_truth"`
	} `parquet:"reward_model"`
}

// A Parquet dataset with chat prompts, scored by a remote reward model over
// HTTP, walked for one epoch.
func TestRunParquetChatHTTPReward(t *testing.T) {
	dir := t.TempDir()
	var rows []verlRow
	for i := range 5 {
		r := verlRow{DataSource: "gsm8k", Prompt: []verlMessage{
			{"system", "Answer with a number."}, {"user", fmt.Sprintf("%d+%d?", i, i)}}}
		r.RewardModel.GroundTruth = fmt.Sprint(2 * i)
		rows = append(rows, r)
	}
	data := filepath.Join(dir, "train.parquet")
	if err := parquet.WriteFile(data, rows); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		prompts []string
		labels  []string
		calls   int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Query, Prompts, Labels []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		calls++
		prompts = append(prompts, req.Prompts...)
		labels = append(labels, req.Labels...)
		mu.Unlock()
		rs := make([]float64, len(req.Query))
		for i, q := range req.Query {
			rs[i] = float64(len(q)%3) / 2 // varied rewards give non-zero advantages
		}
		json.NewEncoder(w).Encode(map[string]any{"rewards": rs})
	}))
	defer srv.Close()
	src := fmt.Sprintf(`package stx

recipes: verl_grpo: recipes.grpo & {
	task: {
		name: "parquet"
		path: %q
		validation_split: 0.2
		columns: answer: "reward_model.ground_truth"
		reward: [{fn: "http", url: %q, weight: 1, timeout: 10}]
	}
	knobs: {num_rollout: 5, total_epochs: 1, rollout_batch_size: 2, n_samples_per_prompt: 2, eval_every: 0}
}
`, data, srv.URL+"/get_reward")
	file := filepath.Join(dir, "verl.cue")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	catalog, err := filepath.Abs(filepath.Join("..", "recipes.cue"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := Load([]string{catalog, file}, schema.Options{Dir: dir, Only: "verl_grpo"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cat, "verl_grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	// 4 train prompts (1 of 5 held out) in rollouts of 2: one epoch is 2
	// rollouts, though num_rollout is 5.
	if res.Rollouts != 2 {
		t.Errorf("%d rollouts, want 2 (total_epochs 1)", res.Rollouts)
	}
	tr := trainRecords(metrics(t, res.Dir))
	last := tr[len(tr)-1]
	if e := num(t, last, "epoch"); e != 1 {
		t.Errorf("epoch %g, want 1", e)
	}
	num(t, last, "reward/actor/mean")
	num(t, last, "advantage/actor/std")
	mu.Lock()
	defer mu.Unlock()
	// 2 rollouts of 4 completions, then the final evaluation of 1 prompt.
	if calls != 3 || len(prompts) != 9 {
		t.Errorf("%d requests with %d prompts, want 3 with 9", calls, len(prompts))
	}
	for i, p := range prompts {
		if !strings.HasPrefix(p, "system: Answer with a number.\nuser: ") || !strings.HasSuffix(p, "?\nassistant: ") {
			t.Errorf("prompt %d not rendered from the chat messages: %q", i, p)
		}
		if want := fmt.Sprint(2 * int(p[len("system: Answer with a number.\nuser: ")]-'0')); labels[i] != want {
			t.Errorf("label of %q is %q, want %q", p, labels[i], want)
		}
	}
}

func TestPlannedRollouts(t *testing.T) {
	for _, tc := range []struct {
		numRollout, epochs, batch, nTrain, want int
	}{
		{20, 0, 8, 100, 20},
		{20, 1, 8, 100, 13},
		{20, 2, 8, 100, 20},
		{5, 1, 4, 8, 2},
		{5, 3, 4, 8, 5},
	} {
		l := &loop{nTrain: tc.nTrain}
		k := schema.Knobs{NumRollout: tc.numRollout, TotalEpochs: tc.epochs, RolloutBatchSize: tc.batch}
		if got := l.plannedRollouts(k); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc, got, tc.want)
		}
	}
}
