package tasks

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func TestRegistry(t *testing.T) {
	for _, name := range []string{"arithmetic", "sorting", "reverse", "mixture2d", "jsonl"} {
		if !slices.Contains(Names(), name) {
			t.Errorf("built-in task %q not registered", name)
		}
	}
	if !slices.IsSorted(Names()) {
		t.Errorf("Names not sorted: %v", Names())
	}
	_, err := New(schema.Task{Name: "arithmetc"}, 1)
	if err == nil || !strings.Contains(err.Error(), `unknown task "arithmetc" (known: arithmetic, `) {
		t.Errorf("unknown task error: %v", err)
	}

	boom := errors.New("boom")
	var gotSizes [2]int
	f := func(t schema.Task, k schema.Knobs) (Task, error) {
		gotSizes = [2]int{t.TrainSize, t.ValidationSize}
		return nil, boom
	}
	if err := Register("registry_test_task", f); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(Names(), "registry_test_task") {
		t.Error("registered task missing from Names")
	}
	for _, tc := range []struct {
		name string
		f    Factory
		want string
	}{
		{"registry_test_task", f, "already registered"},
		{"", f, "empty task name"},
		{"x_nil", nil, "nil factory"},
	} {
		if err := Register(tc.name, tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%q): %v, want %q", tc.name, err, tc.want)
		}
	}
	// Zero sizes take the schema defaults; factory errors name the task.
	_, err = New(schema.Task{Name: "registry_test_task"}, 1)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `task "registry_test_task": boom`) {
		t.Errorf("factory error not wrapped: %v", err)
	}
	if gotSizes != [2]int{DefaultTrainSize, DefaultValidationSize} {
		t.Errorf("factory saw sizes %v, want defaults", gotSizes)
	}
	if _, err := New(schema.Task{Name: "arithmetic", TrainSize: -1}, 1); err == nil {
		t.Error("negative train_size accepted")
	}
}

func TestForKind(t *testing.T) {
	task := newText(t, "reverse", 400, 10, 2)
	train := task.Train()

	for _, k := range []Kind{KindRL, KindSFT, KindPreference} {
		got, err := ForKind(train, k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		for i := range got {
			if got[i].Answer != train[i].Answer || got[i].Chosen != train[i].Chosen {
				t.Fatalf("%s changed example %d", k, i)
			}
		}
	}

	kto, err := ForKind(train, KindKTO)
	if err != nil {
		t.Fatal(err)
	}
	var good int
	for i, ex := range kto {
		if !ex.HasLabel {
			t.Fatalf("KTO example %d has no label", i)
		}
		want := train[i].Rejected
		if ex.Label {
			good++
			want = train[i].Answer
		}
		if ex.Answer != want {
			t.Fatalf("KTO example %d: completion %q, label %v", i, ex.Answer, ex.Label)
		}
	}
	// About half desirable: 400 fair coin flips stay within 5 sd (±50).
	if good < 150 || good > 250 {
		t.Errorf("%d of 400 KTO completions desirable, want about half", good)
	}
	if train[0].HasLabel {
		t.Error("ForKind modified its input")
	}
	again, _ := ForKind(train, KindKTO)
	if !slices.EqualFunc(kto, again, func(a, b Example) bool { return a.Answer == b.Answer && a.Label == b.Label }) {
		t.Error("KTO view not deterministic")
	}

	// SFT on preference records imitates the chosen completion.
	sft, err := ForKind([]Example{{ID: "p", Prompt: "x", Chosen: "c", Rejected: "r"}}, KindSFT)
	if err != nil || sft[0].Answer != "c" {
		t.Errorf("SFT from a pair: %+v, %v", sft, err)
	}

	for _, tc := range []struct {
		name string
		ex   Example
		k    Kind
		want string
	}{
		{"rl without answer", Example{ID: "a", Chosen: "c", Rejected: "r"}, KindRL, "no answer"},
		{"rl on labelled", Example{ID: "a", Answer: "x", HasLabel: true, Label: true}, KindRL, "not a reference answer"},
		{"sft on undesirable", Example{ID: "a", Answer: "x", HasLabel: true}, KindSFT, "undesirable"},
		{"sft without text", Example{ID: "a"}, KindSFT, "no completion"},
		{"preference without pair", Example{ID: "a", Answer: "x"}, KindPreference, "no chosen/rejected"},
		{"kto without either", Example{ID: "a", Answer: "x"}, KindKTO, "neither a KTO label"},
		{"flow without point", Example{ID: "a", Answer: "x"}, KindFlow, "no point"},
		{"unknown kind", Example{ID: "a"}, Kind("dpo"), `unknown data kind "dpo"`},
	} {
		if _, err := ForKind([]Example{tc.ex}, tc.k); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}

	mix, err := New(schema.Task{Name: "mixture2d", TrainSize: 5, ValidationSize: 5}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ForKind(mix.Train(), KindFlow); err != nil {
		t.Error(err)
	}
	if !slices.Contains(mix.Kinds(), KindFlow) || slices.Contains(mix.Kinds(), KindRL) {
		t.Errorf("mixture kinds %v", mix.Kinds())
	}
}

// TestNewForDifficultyKnobs: task_digits and task_ops reach the arithmetic
// task; zero knobs keep its defaults (2 digits, "+-").
func TestNewForDifficultyKnobs(t *testing.T) {
	for _, tc := range []struct {
		digits  int
		ops     string
		maxOpnd int
		opsSeen string
	}{
		{1, "+", 9, "+"},
		{1, "+-", 9, "+-"},
		{0, "", 99, "+-"},
		{3, "*", 999, "*"},
	} {
		task, err := NewFor(schema.Task{Name: "arithmetic", TrainSize: 80, ValidationSize: 20},
			schema.Knobs{Seed: 3, TaskDigits: tc.digits, TaskOps: tc.ops})
		if err != nil {
			t.Fatal(err)
		}
		big, seen := 0, ""
		for _, ex := range task.Train() {
			i := strings.IndexAny(ex.Prompt, "+-*")
			a, err1 := strconv.Atoi(ex.Prompt[:i])
			b, err2 := strconv.Atoi(strings.TrimSuffix(ex.Prompt[i+1:], "="))
			if err1 != nil || err2 != nil {
				t.Fatalf("prompt %q does not parse", ex.Prompt)
			}
			big = max(big, a, b)
			if !strings.Contains(seen, ex.Prompt[i:i+1]) {
				seen += ex.Prompt[i : i+1]
			}
		}
		if big > tc.maxOpnd || big < tc.maxOpnd*8/10 {
			t.Errorf("digits %d: largest operand %d, want about %d", tc.digits, big, tc.maxOpnd)
		}
		if len(seen) != len(tc.opsSeen) || strings.Trim(seen, tc.opsSeen) != "" {
			t.Errorf("ops %q: saw %q", tc.ops, seen)
		}
	}
	if _, err := NewFor(schema.Task{Name: "arithmetic"}, schema.Knobs{TaskDigits: 12}); err == nil {
		t.Error("12 digits accepted")
	}
}

// TestProbe: Probe refuses what NewFor refuses, with the same error, and
// accepts what it accepts.
func TestProbe(t *testing.T) {
	for _, tc := range []struct {
		task schema.Task
		k    schema.Knobs
	}{
		{schema.Task{Name: "arithmetic", TrainSize: 80, ValidationSize: 20}, schema.Knobs{TaskDigits: 1, TaskOps: "+"}},
		{schema.Task{Name: "arithmetic", TrainSize: 81, ValidationSize: 20}, schema.Knobs{TaskDigits: 1, TaskOps: "+"}},
		{schema.Task{Name: "arithmetic"}, schema.Knobs{TaskDigits: 1, TaskOps: "+-"}},
		{schema.Task{Name: "arithmetic"}, schema.Knobs{TaskDigits: 2}},
		{schema.Task{Name: "sorting", TrainSize: 1000, ValidationSize: 100}, schema.Knobs{}},
		{schema.Task{Name: "reverse", TrainSize: 1000000, ValidationSize: 1000000}, schema.Knobs{}},
		{schema.Task{Name: "arithmetic", TrainSize: -1}, schema.Knobs{}},
		{schema.Task{Name: "mixture2d"}, schema.Knobs{}},
	} {
		_, full := NewFor(tc.task, tc.k)
		_, probe := Probe(tc.task, tc.k)
		if fmt.Sprint(full) != fmt.Sprint(probe) {
			t.Errorf("%+v %+v: NewFor says %v, Probe %v", tc.task, tc.k, full, probe)
		}
	}
}
