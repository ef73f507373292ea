package tasks

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"stx.dev/stx/schema"
)

// TestHelperRewardCommand is not a test: it is the reward command the
// tests below start (the test binary run again with STX_REWARD_HELPER set).
func TestHelperRewardCommand(t *testing.T) {
	mode := os.Getenv("STX_REWARD_HELPER")
	if mode == "" {
		t.Skip("helper process only")
	}
	fmt.Fprintln(os.Stderr, "helper starting in mode", mode)
	switch mode {
	case "selftest":
		// A start-up line nobody asked for: paired by order, it would shift
		// every later reward by one request.
		fmt.Println(`{"request_id": 0, "reward": -1}`)
	case "closed":
		// Closes its stdout and stays alive: stx must not wait for ever.
		os.Stdout.Close()
		time.Sleep(time.Hour)
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	var held []commandRequest // "reverse" answers a batch's requests backwards
	for sc.Scan() {
		n++
		var req commandRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			os.Exit(3)
		}
		switch mode {
		case "crash-once":
			marker := os.Getenv("STX_REWARD_MARKER")
			if _, err := os.Stat(marker); err != nil && n == 2 {
				os.WriteFile(marker, nil, 0o644)
				fmt.Fprintln(os.Stderr, "crashing on purpose")
				os.Exit(2)
			}
		case "hang":
			fmt.Fprintln(os.Stderr, "hanging on request", n)
			time.Sleep(time.Hour)
		case "garbage":
			fmt.Println("not json")
			continue
		case "error":
			fmt.Printf("{\"request_id\": %d, \"error\": \"cannot grade this\"}\n", req.RequestID)
			continue
		case "noid":
			fmt.Println(`{"reward": 1}`)
			continue
		case "twice":
			fmt.Printf("{\"request_id\": %d, \"reward\": 1}\n{\"request_id\": %d, \"reward\": 1}\n", req.RequestID, req.RequestID)
			continue
		case "twovalues":
			fmt.Printf("{\"request_id\": %d, \"reward\": 1} {\"request_id\": %d, \"reward\": 2}\n", req.RequestID, req.RequestID+1)
			continue
		case "reverse":
			if held = append(held, req); len(held) < 5 {
				continue
			}
			for k := len(held) - 1; k >= 0; k-- {
				fmt.Printf("{\"request_id\": %d, \"reward\": %g}\n", held[k].RequestID, reward(held[k]))
			}
			held = held[:0]
			continue
		}
		fmt.Printf("{\"request_id\": %d, \"reward\": %g}\n", req.RequestID, reward(req))
	}
	os.Exit(0)
}

// reward is the helper's grade: 1 for the answer, else the completion's
// length / 10, plus the metadata's bonus.
func reward(req commandRequest) float64 {
	r := float64(len(req.Completion)) / 10
	if req.Completion == req.Answer {
		r = 1
	}
	var meta struct{ Bonus float64 }
	json.Unmarshal(req.Metadata, &meta)
	return r + meta.Bonus
}

func helperCommand(t *testing.T, mode string, timeout float64) schema.Reward {
	t.Setenv("STX_REWARD_HELPER", mode)
	t.Setenv("STX_REWARD_MARKER", filepath.Join(t.TempDir(), "crashed"))
	return schema.Reward{Fn: "command", Weight: 1, Command: []string{os.Args[0], "-test.run=^TestHelperRewardCommand$"},
		Timeout: timeout, Retries: 2}
}

func externalBatch() ([]string, []Example) {
	exs := []Example{
		{ID: "a", Prompt: "p1", Answer: "yes"},
		{ID: "b", Prompt: "p2", Answer: "no", Metadata: json.RawMessage(`{"bonus": 2}`)},
		{ID: "c", Prompt: "p3", Answer: "x"},
		{ID: "d", Prompt: "p4", Answer: "y"},
		{ID: "e", Prompt: "p5", Answer: "z"},
	}
	return []string{"yes", "no", "abcd", "", "z"}, exs
}

func TestCommandReward(t *testing.T) {
	want := []float64{0.5 * 1, 0.5 * 3, 0.5 * 0.4, 0, 0.5 * 1}
	for _, mode := range []string{"ok", "crash-once", "reverse"} {
		t.Run(mode, func(t *testing.T) {
			term := helperCommand(t, mode, 20)
			term.Weight = 0.5
			rw, err := NewReward([]schema.Reward{term}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rw.Close()
			cs, exs := externalBatch()
			for round := range 2 { // the process serves several batches
				rs, _, err := rw.ScoreBatch(cs, exs)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for i := range want {
					if d := rs[i] - want[i]; d > 1e-12 || d < -1e-12 {
						t.Fatalf("round %d: rewards %v, want %v", round, rs, want)
					}
				}
			}
			if err := rw.Close(); err != nil {
				t.Error(err)
			}
			if _, err := os.Stat(os.Getenv("STX_REWARD_MARKER")); (err == nil) != (mode == "crash-once") {
				t.Errorf("mode %s: crash marker: %v", mode, err)
			}
		})
	}
}

func TestCommandRewardErrors(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		timeout float64
		want    []string
	}{
		{"hang", 0.3, []string{"request 1 of 5 (after 2 retries): no reply within 300ms", "hanging on request 1"}},
		{"garbage", 20, []string{`reply "not json" is not {"request_id": n, "reward": number}`, "helper starting in mode garbage"}},
		{"error", 20, []string{"command reported: cannot grade this"}},
		{"selftest", 20, []string{`reply "{\"request_id\": 0, \"reward\": -1}" answers request_id 0, which is not awaiting an answer`}},
		{"twice", 20, []string{"request 2 of 5", "answers request_id 1, which is not awaiting an answer"}},
		{"twovalues", 20, []string{"the line holds more than one JSON value"}},
		{"noid", 20, []string{"it has no request_id"}},
		// Closed stdout, alive process: killed at the timeout (or, on a machine
		// so loaded that the helper starts after it, timed out): never a hang.
		{"closed", 1, []string{"(after 2 retries): command closed its stdout but kept running (killed)|no reply within 1s"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rw, err := NewReward([]schema.Reward{helperCommand(t, tc.mode, tc.timeout)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rw.Close()
			cs, exs := externalBatch()
			_, _, err = rw.ScoreBatch(cs, exs)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(strings.Split(w, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			// The reward recovers on the next batch only if the command
			// does; either way a second call must not hang or panic.
			if tc.mode == "garbage" {
				if _, _, err := rw.ScoreBatch(cs[:1], exs[:1]); err == nil {
					t.Error("garbage command scored on the second call")
				}
			}
		})
	}
	// A program that does not exist fails when the reward is built.
	_, err := NewReward([]schema.Reward{{Fn: "command", Weight: 1, Command: []string{"/nonexistent/grader"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/grader") {
		t.Errorf("missing program: %v", err)
	}
	if _, err := NewReward([]schema.Reward{{Fn: "command", Weight: 1}}, nil); err == nil {
		t.Error("empty command accepted")
	}
}

func TestHTTPReward(t *testing.T) {
	var calls, failures atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		var req struct {
			Query   []string `json:"query"`
			Prompts []string `json:"prompts"`
			Labels  []string `json:"labels"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Query) != len(req.Prompts) || len(req.Query) != len(req.Labels) {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/flaky":
			if failures.Add(1) <= 2 {
				http.Error(w, "warming up", http.StatusServiceUnavailable)
				return
			}
		case "/down":
			http.Error(w, "model not loaded", http.StatusServiceUnavailable)
			return
		case "/bad":
			http.Error(w, "unknown field", http.StatusUnprocessableEntity)
			return
		case "/nokey":
			fmt.Fprint(w, `{"scores": [1]}`)
			return
		case "/short":
			fmt.Fprint(w, `{"rewards": [1]}`)
			return
		}
		rs := make([]float64, len(req.Query))
		for i, q := range req.Query {
			// query = prompt + completion; 1 when the completion is the label.
			if strings.TrimPrefix(q, req.Prompts[i]) == req.Labels[i] {
				rs[i] = 1
			} else {
				rs[i] = -float64(len(q))
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"rewards": rs, "extra_logs": map[string]any{}})
	}))
	defer srv.Close()
	term := func(path string, batch int) schema.Reward {
		return schema.Reward{Fn: "http", Weight: 1, URL: srv.URL + path, Timeout: 5, Retries: 3, BatchSize: batch}
	}
	build := func(tm schema.Reward) *Reward {
		rw, err := NewReward([]schema.Reward{tm}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range rw.terms {
			tt.batch.(*httpScorer).backoff = time.Millisecond
		}
		return rw
	}
	cs, exs := externalBatch()
	want := []float64{1, 1, -6, -2, 1}
	for _, tc := range []struct {
		path  string
		batch int
		calls int32
	}{{"/", 0, 1}, {"/", 2, 3}, {"/flaky", 0, 3}} {
		calls.Store(0)
		rs, _, err := build(term(tc.path, tc.batch)).ScoreBatch(cs, exs)
		if err != nil {
			t.Fatalf("%s batch %d: %v", tc.path, tc.batch, err)
		}
		if fmt.Sprint(rs) != fmt.Sprint(want) || calls.Load() != tc.calls {
			t.Errorf("%s batch %d: %v in %d calls, want %v in %d", tc.path, tc.batch, rs, calls.Load(), want, tc.calls)
		}
	}
	for _, tc := range []struct {
		path, want string
		calls      int32
	}{
		{"/down", "status 503 Service Unavailable: model not loaded (after 3 retries)", 4},
		{"/bad", "status 422 Unprocessable Entity: unknown field", 1},
		{"/nokey", `answer has no "rewards" (keys: scores)`, 1},
		{"/short", `"rewards" has 1 values for 5 queries`, 1},
	} {
		calls.Store(0)
		_, _, err := build(term(tc.path, 0)).ScoreBatch(cs, exs)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "POST "+srv.URL+tc.path) || calls.Load() != tc.calls {
			t.Errorf("%s: %v after %d calls; want %q after %d", tc.path, err, calls.Load(), tc.want, tc.calls)
		}
	}
	// A closed port: connection refused is retried, then reported.
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	rw := build(schema.Reward{Fn: "http", Weight: 1, URL: url, Timeout: 1, Retries: 1})
	if _, _, err := rw.ScoreBatch(cs, exs); err == nil || !strings.Contains(err.Error(), "after 1 retries") {
		t.Errorf("dead server: %v", err)
	}
}
