package tasks

import (
	"testing"

	"stx.dev/stx/schema"
)

func TestExtractAnswer(t *testing.T) {
	tests := []struct {
		name, text, want string
		ok               bool
	}{
		{"gsm8k marker", "She sold 48/2 = 24 clips in May.\n#### 72", "72", true},
		{"gsm8k marker with text after the line", "#### 1,234\nThat is all.", "1,234", true},
		{"last gsm8k marker wins", "#### 5\nno wait\n#### 6", "6", true},
		{"boxed", `The answer is $\boxed{42}$.`, "42", true},
		{"boxed nested braces", `so \boxed{\frac{1}{2}} is it`, `\frac{1}{2}`, true},
		{"boxed deeply nested", `\boxed{\left(\frac{\sqrt{3}}{2}, 1\right)}`, `\left(\frac{\sqrt{3}}{2}, 1\right)`, true},
		{"last boxed wins", `\boxed{1} then \boxed{2}`, "2", true},
		{"fbox", `\fbox{7}`, "7", true},
		{"boxed without braces", `\boxed 5.`, "5", true},
		{"unbalanced boxed falls back to last number", `\boxed{3 and 4`, "4", true},
		{"answer tag", "<think>1+1 is 2, times 3</think><answer>6</answer>", "6", true},
		{"answer tag with boxed inside", `<answer>it is \boxed{9}</answer>`, "9", true},
		{"answer tag expression", "<answer>x = 3/4</answer>", "x = 3/4", true},
		{"last number fallback", "First 3 apples, then 5 more, total 8.", "8", true},
		{"last number with thousands", "It costs 1,234,567 dollars", "1,234,567", true},
		{"last number negative", "the result is -17", "-17", true},
		{"last number unicode minus", "the result is \u221217", "-17", true},
		{"last number decimal", "pay 3.50 now.", "3.50", true},
		{"last number fraction", "half is 1/2", "1/2", true},
		{"no number", "I do not know", "", false},
		{"empty", "", "", false},
	}
	for _, tc := range tests {
		got, ok := ExtractAnswer(tc.text)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ExtractAnswer(%q) = %q, %v; want %q, %v", tc.name, tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMathReward(t *testing.T) {
	term := schema.Reward{Fn: "math", Tolerance: 1e-6}
	f, err := NewRewardFunc(term)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, completion, answer string
		want                     float64
	}{
		// GSM8K
		{"gsm8k exact", "#### 72", "#### 72", 1},
		{"gsm8k reference with reasoning", "so 72", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1},
		{"gsm8k wrong", "#### 71", "#### 72", 0},
		{"gsm8k marker beats earlier numbers", "3+4=7, 7*10=70\n#### 70", "70", 1},
		{"first number is not the answer", "72 is wrong, it is 73", "73", 1},
		{"first number is not the answer (neg)", "73 is right? no: 72", "73", 0},
		{"thousands separator", "#### 1,234", "1234", 1},
		{"thousands separator in reference", "1234", "#### 1,234", 1},
		{"thousands with decimals", "1,234.50", "1234.5", 1},
		{"dollar sign", "#### $18", "18", 1},
		{"trailing period", "The answer is 18.", "18", 1},
		{"trailing units", "#### 18 dollars", "18", 1},
		{"trailing units latex", `\boxed{5\text{ cm}}`, "5", 1},
		{"negative", "#### -3", "-3", 1},
		{"sign matters", "#### 3", "-3", 0},
		// fractions and decimals
		{"fraction equals decimal", "#### 3/4", "0.75", 1},
		{"decimal equals fraction", "0.75", `\frac{3}{4}`, 1},
		{"latex frac equals slash", `\boxed{\frac{3}{4}}`, "3/4", 1},
		{"dfrac", `\boxed{\dfrac{3}{4}}`, `\frac{3}{4}`, 1},
		{"tfrac", `\boxed{\tfrac{1}{2}}`, "0.5", 1},
		{"short frac", `\boxed{\frac12}`, "1/2", 1},
		{"negative frac", `\boxed{-\frac{1}{2}}`, "-0.5", 1},
		{"frac with negative numerator", `\boxed{\frac{-1}{2}}`, "-1/2", 1},
		{"wrong fraction", `\boxed{\frac{2}{3}}`, "0.66", 0},
		{"integer as decimal", "#### 5.0", "5", 1},
		{"bare decimal", "#### .5", "1/2", 1},
		{"mixed number", "#### 2 1/2", "2.5", 1},
		{"mixed number latex", `\boxed{2\frac{1}{2}}`, "5/2", 1},
		{"mixed number is not a concatenation", "#### 2 1/2", "21/2", 0},
		{"division by zero is not a number", `\boxed{\frac{1}{0}}`, "0", 0},
		// percentages
		{"percent equals number", "#### 50%", "50", 1},
		{"percent equals fraction", "#### 50%", "0.5", 1},
		{"latex percent", `\boxed{25\%}`, "25", 1},
		{"number equals percent reference", "#### 25", "25%", 1},
		{"wrong percent", "#### 40%", "50", 0},
		// LaTeX equivalence
		{"left right", `\boxed{\left(1, 2\right)}`, "(1,2)", 1},
		{"spaces ignored", `\boxed{x + 1}`, "x+1", 1},
		{"spacing commands", `\boxed{2\,000}`, "2000", 1},
		{"dollar math", `$\boxed{7}$`, "$7$", 1},
		{"degrees", `\boxed{90^\circ}`, "90", 1},
		{"variable assignment", `\boxed{x = 4}`, "4", 1},
		{"sqrt short form", `\boxed{\sqrt3}`, `\sqrt{3}`, 1},
		{"expression differs", `\boxed{x+2}`, "x+1", 0},
		{"text answer case", `\boxed{\text{Yes}}`, "yes", 1},
		{"pi expression", `\boxed{\frac{\pi}{2}}`, `\dfrac{\pi}{2}`, 1},
		// think/answer template
		{"answer tag", "<think>2 and 2</think><answer>4</answer>", "4", 1},
		{"answer tag wrong", "<think>4 is likely</think><answer>5</answer>", "4", 0},
		{"answer tag beats think numbers", "<think>maybe 4</think>\n<answer>The total is 12.</answer>", "12", 1},
		// no answer
		{"no answer", "I am not sure.", "4", 0},
		{"empty completion", "", "4", 0},
		{"empty reference", "4", "", 0},
	}
	if len(tests) < 40 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tc := range tests {
		if got := f(tc.completion, Example{Answer: tc.answer}); got != tc.want {
			p, _ := ExtractAnswer(tc.completion)
			t.Errorf("%s: math(%q, answer %q) = %v, want %v (extracted %q → %q, reference %q)",
				tc.name, tc.completion, tc.answer, got, tc.want, p, normalizeMath(p), normalizeMath(referenceAnswer(tc.answer)))
		}
	}
}

func TestMathToleranceAndFormat(t *testing.T) {
	loose, err := NewRewardFunc(schema.Reward{Fn: "math", Tolerance: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if loose("#### 0.667", Example{Answer: "2/3"}) != 1 {
		t.Error("tolerance 0.01 rejects 0.667 for 2/3")
	}
	if _, err := NewRewardFunc(schema.Reward{Fn: "math", Tolerance: -1}); err == nil {
		t.Error("negative tolerance accepted")
	}
	think, err := NewRewardFunc(schema.Reward{Fn: "think_format"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    string
		want float64
	}{
		{"<think>a\nb</think><answer>4</answer>", 1},
		{"  <think>x</think>\n\n<answer>4</answer>\n", 1},
		{"<think>x</think>", 0},
		{"<answer>4</answer>", 0},
		{"<answer>4</answer><think>x</think>", 0},
		{"<think>x</think><answer>4</answer> trailing", 0},
		{"<think>x</think><answer>4</answer><answer>5</answer>", 0},
	} {
		if got := think(tc.c, Example{}); got != tc.want {
			t.Errorf("think_format(%q) = %v, want %v", tc.c, got, tc.want)
		}
	}
	contains, _ := NewRewardFunc(schema.Reward{Fn: "contains"})
	if contains("the answer: Paris.", Example{Answer: " Paris "}) != 1 || contains("London", Example{Answer: "Paris"}) != 0 ||
		contains("x", Example{Answer: ""}) != 0 {
		t.Error("contains with the answer")
	}
	lit, _ := NewRewardFunc(schema.Reward{Fn: "contains", Pattern: "[ok]"})
	if lit("it is [ok]", Example{}) != 1 || lit("it is o", Example{}) != 0 {
		t.Error("contains takes pattern literally")
	}
}
