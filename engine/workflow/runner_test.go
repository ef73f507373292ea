package workflow

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the fake environments: with STX_FAKE_ENV set
// it serves that environment on stdin/stdout instead of running tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("STX_FAKE_ENV"); mode != "" {
		os.Exit(fakeEnv(mode))
	}
	os.Exit(m.Run())
}

// fakeEnv: reset observes "start <prompt>"; each step observes "obs <n>"
// with reward 0.5 and is done when the action is "stop". The mode bends it:
// malformed, hang (on step), crash (on step), crash_once (the first process
// only, marked by the file $STX_FAKE_MARK), error (on step).
func fakeEnv(mode string) int {
	if mode == "calculator" {
		if err := ServeCalculator(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	sc := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	turn := 0
	for sc.Scan() {
		var req map[string]any
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			out.Encode(map[string]any{"error": err.Error()})
			continue
		}
		if req["op"] == "reset" {
			turn = 0
			if mode == "malformed" {
				fmt.Println("this is not json")
				continue
			}
			task := req["task"].(map[string]any)
			out.Encode(map[string]any{"observation": fmt.Sprintf("start %v seed %v", task["prompt"], req["seed"])})
			continue
		}
		turn++
		switch mode {
		case "hang":
			time.Sleep(time.Hour)
		case "crash":
			fmt.Fprintln(os.Stderr, "boom")
			return 3
		case "crash_once":
			mark := os.Getenv("STX_FAKE_MARK")
			if _, err := os.Stat(mark); err != nil {
				os.WriteFile(mark, nil, 0o644)
				fmt.Fprintln(os.Stderr, "first process crashes")
				return 3
			}
		case "error":
			out.Encode(map[string]any{"error": "bad action"})
			continue
		}
		done := req["action"] == "stop"
		out.Encode(map[string]any{"observation": fmt.Sprintf("obs %d", turn), "reward": 0.5, "done": done,
			"info": map[string]any{"turn": turn}})
	}
	return 0
}

// scripted acts "go" until a conversation has stopAt actions, then "stop".
type scripted struct {
	stopAt   int
	maxChars int // > 0: conversations longer than this are truncated
	calls    int
}

func (p *scripted) Act(convs [][]Message) ([]Action, error) {
	p.calls++
	out := make([]Action, len(convs))
	for i, c := range convs {
		text, _ := Plain.Render(c)
		if p.maxChars > 0 && len(text) > p.maxChars {
			out[i] = Action{Truncated: true}
			continue
		}
		n := len(c) / 2 // actions so far
		a := "go"
		if n+1 >= p.stopAt {
			a = "stop"
		}
		out[i] = Action{Text: a, PromptTokens: []int32{int32(len(text))}, Tokens: []int32{int32(n)}, LogProbs: []float32{-1}}
	}
	return out, nil
}

func fakeRunner(t *testing.T, mode string, cfg Config) *Runner {
	t.Helper()
	t.Setenv("STX_FAKE_ENV", mode)
	cfg.Command = []string{os.Args[0]}
	if cfg.MaxTurns == 0 {
		cfg.MaxTurns = 5
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 2
	}
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = 20 * time.Second
	}
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func tasksN(n int) []Task {
	out := make([]Task, n)
	for i := range out {
		out[i] = Task{ID: fmt.Sprint("t", i), Seed: uint64(100 + i), Fields: map[string]any{"id": fmt.Sprint("t", i), "prompt": fmt.Sprint("p", i)}}
	}
	return out
}

func TestRunnerEpisodes(t *testing.T) {
	r := fakeRunner(t, "ok", Config{MaxTurns: 5, Parallel: 2})
	pol := &scripted{stopAt: 3}
	eps, err := r.Run(tasksN(5), pol)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 5 {
		t.Fatalf("%d episodes, want 5", len(eps))
	}
	for i, ep := range eps {
		if ep.Index != i || ep.Termination != TermDone || len(ep.Steps) != 3 || ep.Attempts != 1 {
			t.Fatalf("episode %d: %+v", i, ep)
		}
		if got, want := ep.Steps[0].Observation, fmt.Sprintf("start p%d seed %d", i, 100+i); got != want {
			t.Errorf("first observation %q, want %q", got, want)
		}
		if ep.Steps[2].Observation != "obs 2" || ep.Final != "obs 3" || ep.Reward() != 1.5 {
			t.Errorf("episode %d: steps %+v final %q reward %g", i, ep.Steps, ep.Final, ep.Reward())
		}
		conv := ep.Conversation(2)
		if len(conv) != 5 || conv[3].Role != "assistant" || conv[3].Content != "go" || conv[4].Content != "obs 2" {
			t.Errorf("conversation %+v", conv)
		}
	}
	// 5 episodes of 3 turns, 2 at a time: 3 waves of 3 turns, batched.
	if pol.calls != 9 {
		t.Errorf("policy called %d times, want 9", pol.calls)
	}
	// The processes are reused by the next Run.
	if _, err := r.Run(tasksN(2), &scripted{stopAt: 1}); err != nil || r.Restarts() != 0 {
		t.Fatalf("second run: %v, %d restarts", err, r.Restarts())
	}
}

func TestRunnerMaxTurnsAndTruncation(t *testing.T) {
	r := fakeRunner(t, "ok", Config{MaxTurns: 2, Parallel: 3})
	eps, err := r.Run(tasksN(3), &scripted{stopAt: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if ep.Termination != TermMaxTurns || len(ep.Steps) != 2 {
			t.Errorf("episode %d: %s after %d steps, want max_turns after 2", ep.Index, ep.Termination, len(ep.Steps))
		}
	}
	// A conversation that outgrows the prompt ends the episode "truncated".
	eps, err = r.Run(tasksN(1), &scripted{stopAt: 10, maxChars: 20})
	if err != nil {
		t.Fatal(err)
	}
	if ep := eps[0]; ep.Termination != TermTruncated || len(ep.Steps) != 1 {
		t.Errorf("episode: %s after %d steps, want truncated after 1", ep.Termination, len(ep.Steps))
	}
}

func TestRunnerFailures(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		retries  int
		reason   Termination
		msg      string
		attempts int
	}{
		{"malformed", 1, TermError, `malformed reply from the environment: reply "this is not json" is not a JSON object`, 2},
		{"crash", 0, TermError, "environment process exited (exit status 3); stderr: boom", 1},
		{"error", 2, TermError, "environment error: bad action", 3},
		{"hang", 0, TermTimeout, "no reply from the environment within 300ms", 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := Config{RetryLimit: tc.retries, Parallel: 1}
			if tc.mode == "hang" {
				cfg.StepTimeout = 300 * time.Millisecond
			}
			r := fakeRunner(t, tc.mode, cfg)
			eps, err := r.Run(tasksN(2), &scripted{stopAt: 3})
			if err != nil {
				t.Fatal(err)
			}
			for _, ep := range eps {
				if ep.Termination != tc.reason || !strings.HasPrefix(ep.Reason, tc.msg) || ep.Attempts != tc.attempts {
					t.Errorf("episode %d: %s %q after %d attempts, want %s %q after %d", ep.Index, ep.Termination, ep.Reason, ep.Attempts,
						tc.reason, tc.msg, tc.attempts)
				}
				if len(ep.Steps) != 0 {
					t.Errorf("an episode failed at its first step has %d steps", len(ep.Steps))
				}
			}
			if tc.mode != "error" && r.Restarts() == 0 {
				t.Errorf("a failed process was not restarted")
			}
		})
	}
}

func TestRunnerRetryRecovers(t *testing.T) {
	t.Setenv("STX_FAKE_MARK", t.TempDir()+"/crashed")
	r := fakeRunner(t, "crash_once", Config{RetryLimit: 1, Parallel: 1})
	eps, err := r.Run(tasksN(2), &scripted{stopAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ep := eps[0]; ep.Termination != TermDone || ep.Attempts != 2 || len(ep.Steps) != 2 {
		t.Errorf("episode 0: %s after %d attempts, %d steps; want done after a retry", ep.Termination, ep.Attempts, len(ep.Steps))
	}
	if ep := eps[1]; ep.Termination != TermDone || ep.Attempts != 1 {
		t.Errorf("episode 1: %s after %d attempts", ep.Termination, ep.Attempts)
	}
	if r.Restarts() != 1 {
		t.Errorf("%d restarts, want 1", r.Restarts())
	}
}

func TestRunnerBadCommand(t *testing.T) {
	r, err := NewRunner(Config{Command: []string{"/nonexistent/stx-env"}, MaxTurns: 1, Parallel: 1, StepTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(tasksN(1), &scripted{stopAt: 1}); err == nil || !strings.Contains(err.Error(), "start environment") {
		t.Fatalf("err = %v, want a start error", err)
	}
	if _, err := NewRunner(Config{MaxTurns: 1, Parallel: 1, StepTimeout: time.Second}); err == nil {
		t.Error("an empty command was accepted")
	}
}

// answerer plays the calculator: it computes, then answers what it saw.
type answerer struct{ wrong bool }

func (p answerer) Act(convs [][]Message) ([]Action, error) {
	out := make([]Action, len(convs))
	for i, c := range convs {
		last := c[len(c)-1].Content
		switch {
		case len(c) == 1:
			out[i].Text = "calc: " + strings.TrimSuffix(last, "=")
		case strings.HasPrefix(last, "result: "):
			v := strings.TrimSpace(strings.TrimPrefix(last, "result: "))
			if p.wrong {
				v += "1"
			}
			out[i].Text = "answer: " + v
		default:
			out[i].Text = "???"
		}
	}
	return out, nil
}

func TestCalculatorEnvironment(t *testing.T) {
	r := fakeRunner(t, "calculator", Config{MaxTurns: 4, Parallel: 2})
	tasks := []Task{
		{ID: "a", Fields: map[string]any{"prompt": "12*7+3=", "answer": "87"}},
		{ID: "b", Fields: map[string]any{"prompt": "(10-4)/4=", "answer": "1.5"}},
		{ID: "c", Fields: map[string]any{"prompt": "1/0=", "answer": "0"}},
		{ID: "d", Fields: map[string]any{"prompt": "no answer"}},
	}
	eps, err := r.Run(tasks, answerer{})
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range eps[:2] {
		if ep.Termination != TermDone || ep.Reward() != 1 || !ep.Correct(1) || len(ep.Steps) != 2 {
			t.Errorf("episode %d: %s reward %g steps %+v", i, ep.Termination, ep.Reward(), ep.Steps)
		}
	}
	if ep := eps[2]; ep.Termination != TermMaxTurns || ep.Steps[1].Observation != "error: division by zero\n" || ep.Reward() != 0 {
		t.Errorf("division by zero: %s %+v", ep.Termination, ep.Steps)
	}
	if ep := eps[3]; ep.Termination != TermError || ep.Reason != `environment error: task has no "answer"` {
		t.Errorf("task without answer: %s %q", ep.Termination, ep.Reason)
	}
	eps, err = r.Run(tasks[:1], answerer{wrong: true})
	if err != nil {
		t.Fatal(err)
	}
	if ep := eps[0]; ep.Termination != TermDone || ep.Reward() != 0 || ep.Correct(0) {
		t.Errorf("wrong answer: %s reward %g correct %v", ep.Termination, ep.Reward(), ep.Correct(0))
	}
}

func TestCalculatorStep(t *testing.T) {
	ans, _ := evalExpr("42")
	for _, tc := range []struct {
		action, obs string
		reward      float64
		done        bool
	}{
		{"calc: 6*7", "result: 42\n", 0, false},
		{"CALC: (1+2)*-3", "result: -9\n", 0, false},
		{"calc: 1/3", "result: 0.333333\n", 0, false},
		{"calc: 2*", "error: expression ends early\n", 0, false},
		{"calc: 2)", "error: unexpected \")\" at 2\n", 0, false},
		{"calc: " + strings.Repeat("(", 40) + "1", "error: expression nested deeper than 32\n", 0, false},
		{"hello", calcUsage, 0, false},
		{"answer: 42", "", 1, true},
		{" 42 ", "", 1, true},
		{"answer: 42.0", "", 1, true},
		{"answer: 0x2a", "", 0, true},
		{"answer: 41", "", 0, true},
	} {
		rep := calcStep(tc.action, ans)
		if rep["observation"] != tc.obs || rep["reward"] != tc.reward || rep["done"] != tc.done {
			t.Errorf("%q: %v, want %q %g %v", tc.action, rep, tc.obs, tc.reward, tc.done)
		}
	}
}

// TestRunnerParallelRestarts crashes every process of several slots at once
// (run with -race: slots restart concurrently).
func TestRunnerParallelRestarts(t *testing.T) {
	r := fakeRunner(t, "crash", Config{RetryLimit: 1, Parallel: 3})
	eps, err := r.Run(tasksN(3), &scripted{stopAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if ep.Termination != TermError || ep.Attempts != 2 {
			t.Errorf("episode %d: %s after %d attempts", ep.Index, ep.Termination, ep.Attempts)
		}
	}
	if r.Restarts() != 3 {
		t.Errorf("%d restarts, want 3", r.Restarts())
	}
}
