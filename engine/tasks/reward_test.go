package tasks

import (
	"math"
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func TestRewardFuncs(t *testing.T) {
	ans := func(a string) Example { return Example{ID: "x", Answer: a} }
	tests := []struct {
		name string
		term schema.Reward
		c    string
		ex   Example
		want float64
	}{
		// exact_match
		{"exact equal", exactMatch, "19", ans("19"), 1},
		{"exact trims both", exactMatch, "  19\n", ans(" 19 "), 1},
		{"exact trailing text", exactMatch, "19 apples", ans("19"), 0},
		{"exact empty completion", exactMatch, "", ans("19"), 0},
		{"exact empty both", exactMatch, "  ", ans(""), 1},
		{"exact case sensitive", exactMatch, "ABC", ans("abc"), 0},
		{"exact unicode", exactMatch, " héllo → 世界 ", ans("héllo → 世界"), 1},
		{"exact unicode differs", exactMatch, "hello", ans("héllo"), 0},
		{"exact inner space counts", exactMatch, "1  2 3", ans("1 2 3"), 0},

		// numeric_match
		{"num equal", numericMatch, "19", ans("19"), 1},
		{"num trailing text reads the last number", numericMatch, "12+7 gives 19", ans("19"), 1},
		{"num gsm8k answer", numericMatch, "48/2 = 24 clips\n#### 72", ans("Natalia sold 48/2 = 24 clips.\n#### 72"), 1},
		{"num boxed wins over later numbers", numericMatch, `so \boxed{19}, checked by 12+7`, ans("19"), 1},
		{"num leading text", numericMatch, "the answer is 19.", ans("19"), 1},
		{"num last number wins", numericMatch, "7 then 19", ans("19"), 1},
		{"num first number does not", numericMatch, "19 then 7", ans("19"), 0},
		{"num negative", numericMatch, "-35", ans("-35"), 1},
		{"num sign matters", numericMatch, "35", ans("-35"), 0},
		{"num unicode minus", numericMatch, "\u221235", ans("-35"), 1},
		{"num explicit plus", numericMatch, "+4", ans("4"), 1},
		{"num decimal equal", numericMatch, "2.50", ans("2.5"), 1},
		{"num bare fraction", numericMatch, ".5", ans("0.5"), 1},
		{"num trailing dot", numericMatch, "12.", ans("12"), 1},
		{"num exponent", numericMatch, "1e3", ans("1000"), 1},
		{"num subtraction text reads the last", numericMatch, "3-4", ans("-4"), 1},
		{"num thousands separator", numericMatch, "1,000", ans("1000"), 1},
		{"num fraction", numericMatch, "3/4", ans("0.75"), 1},
		{"num empty completion", numericMatch, "", ans("0"), 0},
		{"num no digits", numericMatch, "nineteen", ans("19"), 0},
		{"num answer without number", numericMatch, "19", ans("n/a"), 0},
		{"num non-ascii digits are not numbers", numericMatch, "١٩", ans("19"), 0},
		{"num default tolerance rejects 1e-3", numericMatch, "19.001", ans("19"), 0},
		{"num within tolerance", schema.Reward{Fn: "numeric_match", Tolerance: 0.01}, "19.005", ans("19"), 1},
		{"num tolerance is inclusive", schema.Reward{Fn: "numeric_match", Tolerance: 0.5}, "19.5", ans("19"), 1},
		{"num outside tolerance", schema.Reward{Fn: "numeric_match", Tolerance: 0.01}, "19.02", ans("19"), 0},
		{"num overflow is not a match", numericMatch, "1e999", ans("19"), 0},

		// regex
		{"regex found", schema.Reward{Fn: "regex", Pattern: `[0-9]+`}, "ab12cd", ans(""), 1},
		{"regex absent", schema.Reward{Fn: "regex", Pattern: `[0-9]+`}, "abcd", ans(""), 0},
		{"regex empty completion", schema.Reward{Fn: "regex", Pattern: `x`}, "", ans(""), 0},
		{"regex empty pattern matches all", schema.Reward{Fn: "regex", Pattern: ``}, "", ans(""), 1},
		{"regex unicode class", schema.Reward{Fn: "regex", Pattern: `\p{Han}`}, "ok 世", ans(""), 1},

		// format
		{"format whole", schema.Reward{Fn: "format", Pattern: `[0-9]+`}, "123", ans(""), 1},
		{"format trailing text", schema.Reward{Fn: "format", Pattern: `[0-9]+`}, "123 ", ans(""), 0},
		{"format leading text", schema.Reward{Fn: "format", Pattern: `[0-9]+`}, "x123", ans(""), 0},
		{"format alternation anchored as a whole", schema.Reward{Fn: "format", Pattern: `a|b`}, "ab", ans(""), 0},
		{"format multiline flag cannot unanchor", schema.Reward{Fn: "format", Pattern: `(?m)^[0-9]+$`}, "12\nxx", ans(""), 0},
		{"format empty completion", schema.Reward{Fn: "format", Pattern: `[0-9]*`}, "", ans(""), 1},
		{"format sorted list", schema.Reward{Fn: "format", Pattern: `[0-9]( [0-9])*`}, "1 2 3", ans(""), 1},

		// length_penalty
		{"len exact", schema.Reward{Fn: "length_penalty", TargetLength: 4, Scale: 1}, "abcd", ans(""), 0},
		{"len short", schema.Reward{Fn: "length_penalty", TargetLength: 4, Scale: 1}, "ab", ans(""), -0.5},
		{"len long scaled", schema.Reward{Fn: "length_penalty", TargetLength: 4, Scale: 2}, "abcdefgh", ans(""), -2},
		{"len empty", schema.Reward{Fn: "length_penalty", TargetLength: 5, Scale: 1}, "", ans(""), -1},
		{"len counts characters not bytes", schema.Reward{Fn: "length_penalty", TargetLength: 2, Scale: 1}, "世界", ans(""), 0},
		{"len zero scale", schema.Reward{Fn: "length_penalty", TargetLength: 2, Scale: 0}, "abcdef", ans(""), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewRewardFunc(tc.term)
			if err != nil {
				t.Fatal(err)
			}
			if got := f(tc.c, tc.ex); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("%s(%q, answer %q) = %v, want %v", tc.term.Fn, tc.c, tc.ex.Answer, got, tc.want)
			}
		})
	}
}

func TestRewardFuncErrors(t *testing.T) {
	tests := []struct {
		term schema.Reward
		want string
	}{
		{schema.Reward{Fn: "regex", Pattern: `(`}, "bad pattern"},
		{schema.Reward{Fn: "format", Pattern: `[a-`}, "bad pattern"},
		{schema.Reward{Fn: "format", Pattern: `a)|(b`}, "bad pattern"},
		{schema.Reward{Fn: "length_penalty"}, "target_length 0"},
		{schema.Reward{Fn: "length_penalty", TargetLength: 3, Scale: -1}, "scale"},
		{schema.Reward{Fn: "numeric_match", Tolerance: -1}, "tolerance"},
		{schema.Reward{Fn: "numeric_match", Tolerance: math.NaN()}, "tolerance"},
		{schema.Reward{Fn: "exactmatch"}, `unknown reward function "exactmatch"`},
	}
	for _, tc := range tests {
		_, err := NewRewardFunc(tc.term)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewRewardFunc(%+v) = %v, want an error containing %q", tc.term, err, tc.want)
		}
	}
	// The format check must reject a pattern that is only valid once
	// wrapped: "a)|(b" compiles inside \A(?:…)\z.
	if _, err := NewReward([]schema.Reward{{Fn: "format", Pattern: `a)|(b`, Weight: 1}}, nil); err == nil {
		t.Error("NewReward accepted a bad format pattern")
	}
}

func TestRewardCombination(t *testing.T) {
	task, err := NewArithmetic(ArithmeticConfig{}, 10, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	ex := Example{ID: "a", Prompt: "12+7=", Answer: "19"}

	// Default: numeric_match for arithmetic, so trailing text still scores.
	def, err := NewReward(nil, task)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c       string
		reward  float64
		correct bool
	}{{"19", 1, true}, {"19 ok", 1, true}, {"20", 0, false}, {"", 0, false}} {
		r, ok := def.Score(tc.c, ex)
		if r != tc.reward || ok != tc.correct {
			t.Errorf("default Score(%q) = %v, %v; want %v, %v", tc.c, r, ok, tc.reward, tc.correct)
		}
	}

	// Weighted sum; correctness stays numeric_match whatever the terms.
	terms := []schema.Reward{
		{Fn: "exact_match", Weight: 2},
		{Fn: "format", Weight: 0.5, Pattern: `-?[0-9]+`},
		{Fn: "length_penalty", Weight: 1, TargetLength: 2, Scale: 0.25},
	}
	rw, err := NewReward(terms, task)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c       string
		reward  float64
		correct bool
	}{
		{"19", 2 + 0.5, true},
		{"19 is it", 0 + 0 - 0.25*6/2, true},
		{"7", 0 + 0.5 - 0.25*1/2, false},
		{"", -0.25, false},
	} {
		r, ok := rw.Score(tc.c, ex)
		if math.Abs(r-tc.reward) > 1e-12 || ok != tc.correct {
			t.Errorf("Score(%q) = %v, %v; want %v, %v", tc.c, r, ok, tc.reward, tc.correct)
		}
	}

	// Sorting defaults to exact_match: trailing text is wrong.
	sorting, err := NewSorting(SortingConfig{}, 10, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := NewReward(nil, sorting)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := sr.Score("1 2 3 4", Example{Answer: "1 2 3"}); r != 0 || ok {
		t.Errorf("sorting default reward accepted trailing text: %v, %v", r, ok)
	}
	if r, ok := sr.Score(" 1 2 3\n", Example{Answer: "1 2 3"}); r != 1 || !ok {
		t.Errorf("sorting default reward rejected a right answer: %v, %v", r, ok)
	}
	if rw.Continuous() {
		t.Error("text reward says Continuous")
	}
	if _, _, err := rw.ScorePoint([]float32{0, 0}); err == nil {
		t.Error("ScorePoint on a text reward did not fail")
	}
}

func TestNewRewardErrors(t *testing.T) {
	mix, err := NewMixture2D(MixtureConfig{}, 4, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		terms []schema.Reward
		task  Task
		want  string
	}{
		{"bad regex", []schema.Reward{{Fn: "regex", Pattern: "a(", Weight: 1}}, nil, "reward term 0: reward regex: bad pattern"},
		{"second term bad", []schema.Reward{{Fn: "exact_match", Weight: 1}, {Fn: "length_penalty", Weight: 1}}, nil, "reward term 1"},
		{"nan weight", []schema.Reward{{Fn: "exact_match", Weight: math.NaN()}}, nil, "not finite"},
		{"text terms on points", []schema.Reward{{Fn: "exact_match", Weight: 1}}, mix, "scores generated points"},
	} {
		if _, err := NewReward(tc.terms, tc.task); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewReward = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestRewardContinuous(t *testing.T) {
	mix, err := NewMixture2D(MixtureConfig{}, 4, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := NewReward(nil, mix)
	if err != nil {
		t.Fatal(err)
	}
	if !rw.Continuous() {
		t.Fatal("mixture reward is not Continuous")
	}
	mu := mix.Means()[0]
	r, ok, err := rw.ScorePoint([]float32{float32(mu[0]), float32(mu[1])})
	if err != nil || !ok || math.Abs(r) > 1e-6 {
		t.Errorf("ScorePoint(target mean) = %v, %v, %v; want ≈0, true, nil", r, ok, err)
	}
	if r, ok := rw.Score("19", Example{Answer: "19"}); r != 0 || ok {
		t.Errorf("text Score on a continuous reward = %v, %v; want 0, false", r, ok)
	}
}
