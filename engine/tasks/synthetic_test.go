package tasks

import (
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

// solve recomputes a synthetic prompt's answer independently of the
// generators: by parsing the prompt text.
func solve(t *testing.T, task, prompt string) string {
	t.Helper()
	switch task {
	case "arithmetic":
		m := regexp.MustCompile(`^([0-9]+)([-+*])([0-9]+)=$`).FindStringSubmatch(prompt)
		if m == nil {
			t.Fatalf("arithmetic prompt %q has the wrong form", prompt)
		}
		a, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[3])
		switch m[2] {
		case "+":
			return strconv.Itoa(a + b)
		case "-":
			return strconv.Itoa(a - b)
		default:
			return strconv.Itoa(a * b)
		}
	case "sorting":
		m := regexp.MustCompile(`^sort ([0-9]( [0-9])*):$`).FindStringSubmatch(prompt)
		if m == nil {
			t.Fatalf("sorting prompt %q has the wrong form", prompt)
		}
		xs := strings.Fields(m[1])
		slices.Sort(xs)
		return strings.Join(xs, " ")
	case "reverse":
		m := regexp.MustCompile(`^reverse ([a-z]+):$`).FindStringSubmatch(prompt)
		if m == nil {
			t.Fatalf("reverse prompt %q has the wrong form", prompt)
		}
		r := []rune(m[1])
		slices.Reverse(r)
		return string(r)
	}
	t.Fatalf("no solver for %s", task)
	return ""
}

func newText(t *testing.T, name string, train, val, seed int) Task {
	t.Helper()
	task, err := New(schema.Task{Name: name, TrainSize: train, ValidationSize: val}, seed)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func TestSyntheticTextTasks(t *testing.T) {
	for _, name := range []string{"arithmetic", "sorting", "reverse"} {
		t.Run(name, func(t *testing.T) {
			task := newText(t, name, 2000, 200, 7)
			train, val := task.Train(), task.Validation()
			if len(train) != 2000 || len(val) != 200 {
				t.Fatalf("sizes %d/%d, want 2000/200", len(train), len(val))
			}
			if task.Name() != name || !reflect.DeepEqual(task.Kinds(), textKinds) {
				t.Errorf("Name %q Kinds %v", task.Name(), task.Kinds())
			}
			rw, err := NewReward(nil, task)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			trainPrompts := map[string]bool{}
			for _, ex := range train {
				trainPrompts[ex.Prompt] = true
			}
			if len(trainPrompts) != len(train) {
				t.Errorf("train has %d distinct prompts of %d", len(trainPrompts), len(train))
			}
			valPrompts := map[string]bool{}
			wrongKinds := map[string]int{}
			for _, ex := range slices.Concat(val, train) {
				if ids[ex.ID] {
					t.Fatalf("duplicate ID %q", ex.ID)
				}
				ids[ex.ID] = true
				if want := solve(t, name, ex.Prompt); ex.Answer != want {
					t.Fatalf("%q: answer %q, want %q", ex.Prompt, ex.Answer, want)
				}
				if ex.Chosen != ex.Answer || ex.Rejected == "" || ex.Rejected == ex.Answer {
					t.Fatalf("%q: chosen %q rejected %q answer %q", ex.Prompt, ex.Chosen, ex.Rejected, ex.Answer)
				}
				// The rejected answer must be wrong by the task's own test,
				// and the answer right.
				if _, ok := rw.Score(ex.Rejected, ex); ok {
					t.Fatalf("%q: rejected %q scores as correct", ex.Prompt, ex.Rejected)
				}
				if r, ok := rw.Score(ex.Answer, ex); !ok || r != 1 {
					t.Fatalf("%q: answer %q scores %v, %v", ex.Prompt, ex.Answer, r, ok)
				}
				if ex.DataSource != name || ex.HasLabel || ex.Point != nil {
					t.Fatalf("%q: unexpected fields %+v", ex.Prompt, ex)
				}
				if len(ex.Prompt) > 20 || len(ex.Answer) > 12 {
					t.Fatalf("%q → %q: too long for a tiny byte-level model", ex.Prompt, ex.Answer)
				}
				if name == "arithmetic" && len(ex.Answer) > 8 {
					t.Fatalf("arithmetic answer %q exceeds 8 bytes", ex.Answer)
				}
				wrongKinds[mistake(name, ex)]++
			}
			for _, ex := range val {
				valPrompts[ex.Prompt] = true
				if trainPrompts[ex.Prompt] {
					t.Fatalf("validation prompt %q is also in train", ex.Prompt)
				}
			}
			if len(valPrompts) != len(val) {
				t.Errorf("validation has %d distinct prompts of %d", len(valPrompts), len(val))
			}
			// Rejected answers come in several plausible kinds, not one.
			if len(wrongKinds) < 2 {
				t.Errorf("rejected answers are all of one kind: %v", wrongKinds)
			}
			t.Logf("rejected kinds: %v", wrongKinds)
		})
	}
}

// mistake classifies a rejected answer, to check the variety of them.
func mistake(task string, ex Example) string {
	switch task {
	case "arithmetic":
		a, _ := strconv.Atoi(ex.Answer)
		w, _ := strconv.Atoi(ex.Rejected)
		switch d := w - a; d {
		case 1, -1, 10, -10:
			return "off by " + strconv.Itoa(d)
		default:
			return "other operator"
		}
	case "sorting":
		if len(ex.Rejected) < len(ex.Answer) {
			return "dropped"
		}
		return "order"
	default:
		if len(ex.Rejected) < len(ex.Answer) {
			return "truncated"
		}
		return "order"
	}
}

func TestSyntheticDeterminism(t *testing.T) {
	for _, name := range []string{"arithmetic", "sorting", "reverse", "mixture2d"} {
		t.Run(name, func(t *testing.T) {
			a := newText(t, name, 300, 50, 11)
			b := newText(t, name, 300, 50, 11)
			if !reflect.DeepEqual(a.Train(), b.Train()) || !reflect.DeepEqual(a.Validation(), b.Validation()) {
				t.Fatal("same seed gave different splits")
			}
			c := newText(t, name, 300, 50, 12)
			if reflect.DeepEqual(a.Train(), c.Train()) || reflect.DeepEqual(a.Validation(), c.Validation()) {
				t.Fatal("different seeds gave the same splits")
			}
			// Validation is drawn first: it does not depend on train_size.
			d := newText(t, name, 100, 50, 11)
			if !reflect.DeepEqual(a.Validation(), d.Validation()) {
				t.Fatal("validation changed with train_size")
			}
			// Train() hands out copies: editing one does not change the task.
			tr := a.Train()
			tr[0].Prompt = "edited"
			if a.Train()[0].Prompt == "edited" {
				t.Fatal("Train() exposes the task's slice")
			}
		})
	}
	// Tasks with one seed still differ from each other's streams.
	s := newText(t, "sorting", 50, 10, 3).Train()
	r := newText(t, "reverse", 50, 10, 3).Train()
	if s[0].Prompt == r[0].Prompt {
		t.Fatal("unexpected equal prompts across tasks")
	}
}

func TestArithmeticConfig(t *testing.T) {
	task, err := NewArithmetic(ArithmeticConfig{Digits: 1, Ops: "*-", AllowNegative: true}, 150, 40, 5)
	if err != nil {
		t.Fatal(err)
	}
	var neg, mul bool
	for _, ex := range slices.Concat(task.Train(), task.Validation()) {
		if want := solve(t, "arithmetic", ex.Prompt); ex.Answer != want {
			t.Fatalf("%q: answer %q, want %q", ex.Prompt, ex.Answer, want)
		}
		neg = neg || strings.HasPrefix(ex.Answer, "-")
		mul = mul || strings.Contains(ex.Prompt, "*")
		if strings.Contains(ex.Prompt, "+") {
			t.Fatalf("%q uses an operator outside Ops", ex.Prompt)
		}
	}
	if !neg || !mul {
		t.Errorf("AllowNegative/Ops not honoured: negative %v, multiplication %v", neg, mul)
	}
	// Default: no negative results.
	def := newText(t, "arithmetic", 2000, 200, 1)
	for _, ex := range def.Train() {
		if strings.HasPrefix(ex.Answer, "-") || strings.HasPrefix(ex.Rejected, "-") {
			t.Fatalf("default arithmetic gave a negative number: %+v", ex)
		}
	}
}

func TestSyntheticErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func() error
		want string
	}{
		// 1-digit "+-" has 100 + 55 distinct prompts.
		{"capacity", func() error {
			_, err := NewArithmetic(ArithmeticConfig{Digits: 1}, 150, 10, 1)
			return err
		}, "exceed the 155 distinct prompts"},
		{"exact capacity is fine", func() error {
			_, err := NewArithmetic(ArithmeticConfig{Digits: 1}, 145, 10, 1)
			return err
		}, ""},
		{"digits", func() error { _, err := NewArithmetic(ArithmeticConfig{Digits: 10}, 1, 1, 1); return err }, "digits 10"},
		{"ops", func() error { _, err := NewArithmetic(ArithmeticConfig{Ops: "+/"}, 1, 1, 1); return err }, `operator '/'`},
		{"sorting len", func() error { _, err := NewSorting(SortingConfig{MinLen: 1, MaxLen: 3}, 1, 1, 1); return err }, "outside 2…9"},
		{"reverse len", func() error { _, err := NewReverse(ReverseConfig{MinLen: 4, MaxLen: 3}, 1, 1, 1); return err }, "outside 2…12"},
		{"zero train", func() error { _, err := NewReverse(ReverseConfig{}, 0, 1, 1); return err }, "split sizes"},
	} {
		err := tc.f()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestSmallListsStillHaveWrongAnswers(t *testing.T) {
	// Two-element lists and strings include "3 3" and "aa", whose
	// reorderings are still right: the generator must fall back to a
	// truncation.
	s, err := NewSorting(SortingConfig{MinLen: 2, MaxLen: 2}, 90, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReverse(ReverseConfig{MinLen: 2, MaxLen: 2}, 500, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range slices.Concat(s.Train(), s.Validation(), r.Train(), r.Validation()) {
		if ex.Rejected == "" || ex.Rejected == ex.Answer {
			t.Fatalf("%q: rejected %q", ex.Prompt, ex.Rejected)
		}
	}
}
