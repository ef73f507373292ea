package tasks

import (
	"math"
	"strings"
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
		{"last boxed wins", `\boxed{1} was my first guess but really \boxed{2}`, "2", true},
		{"close boxes are one answer", `\boxed{1} then \boxed{2}`, "1,2", true},
		{"boxes joined by and", `x is \boxed{-2} and \boxed{3}`, "-2,3", true},
		{"repeated box once", `\boxed{5}, so \boxed{5}`, "5", true},
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
		{"answer phrase after gsm8k marker", "#### The answer is 72", "72", true},
		{"answer phrase beats a later note", "The answer is 72.\n\nNote: I used 2 steps", "72", true},
		{"answer phrase takes the first number", "The answer is 40 minutes, i.e. 2/3 of an hour", "40", true},
		{"answer phrase beats gsm8k marker", "The answer is 5.\n#### 6", "5", true},
		{"boxed beats answer phrase", `The answer is 5, i.e. \boxed{6}`, "6", true},
		{"answer phrase latex", `So the answer is $\frac{2}{3}$.`, `\frac{2}{3}`, true},
		{"answer phrase chained latex", `The answer is $x = 3$ and $x = -2$.`, "x = 3, x = -2", true},
		{"answer colon", "Answer: 104 marbles", "104", true},
		{"answer colon first", "The answer is 3.\nAnswer: 4", "4", true},
		{"answer after equals", "So the answer: 3 + 4 = 7", "7", true},
		{"answer money", "The answer is $16.", "16", true},
		{"answer thousands", "The answer is 1,250.50 dollars", "1250.50", true},
		{"answer percent", "The answer is 25%.", "25%", true},
		{"answer bold", "Therefore, the answer is **56**.", "56", true},
		{"final answer sentence", "Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", `\frac{1}{2}`, true},
		{"gsm8k marker money", "#### $1,000.", "$1,000.", true},
		{"gsm8k marker words", "#### 18 dollars", "18", true},
		{"last math environment", `so the result is $\frac{1}{2}$, done`, `\frac{1}{2}`, true},
		{"last of environments and numbers", `The area is \(9\), the perimeter \(12\).`, "12", true},
		{"bare fraction", `so the result is \frac{1}{2}`, `\frac{1}{2}`, true},
		{"percent", "The discount is 25%.", "25%", true},
		{"percent word", "So 30 percent of them", "30%", true},
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

// TestMathRewardGrader: the forms a Math-Verify-level grader accepts, and
// the near misses it must not. References here may be bare LaTeX, as
// datasets store them (the Math-Verify table wraps them in $…$).
func TestMathRewardGrader(t *testing.T) {
	f, err := NewRewardFunc(schema.Reward{Fn: "math", Tolerance: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, completion, answer string
		want                     float64
	}{
		// Extraction.
		{"text after the marker", "#### The answer is 72", "72", 1},
		{"a later number in a note", "The answer is 72.\n\nNote: I used 2 steps", "72", 1},
		{"a fraction after the answer", "The answer is 40 minutes, i.e. 2/3 of an hour", "40", 1},
		{"note does not answer", "The answer is 40.\n\nNote: 60 would be wrong.", "60", 0},
		{"final box after a wrong one", `First I got \boxed{10} but rechecking more carefully gives \boxed{12}`, "12", 1},
		{"corrected box is not the answer", `First I got \boxed{12}, but rechecking carefully gives \boxed{13}.`, "12", 0},
		// Symbolic equivalence.
		{"radicals", `\boxed{\sqrt{12}}`, `2\sqrt{3}`, 1},
		{"radicals differ", `\boxed{3\sqrt{2}}`, `2\sqrt{3}`, 0},
		{"sum reordered", `\boxed{3 + 2x}`, "2x+3", 1},
		{"expanded square", `\boxed{x^2 + 2x + 1}`, "(x+1)^2", 1},
		{"extra term", `\boxed{x^2 + 2x + 2}`, "(x+1)^2", 0},
		{"wrong sign", `\boxed{x - 3}`, "x+3", 0},
		{"rationalised", `\boxed{\frac{1}{\sqrt{2}}}`, `\frac{\sqrt{2}}{2}`, 1},
		{"pi over 4", `\boxed{\pi/4}`, `\dfrac{\pi}{4}`, 1},
		{"pi over 3 is not", `\boxed{\pi/3}`, `\dfrac{\pi}{4}`, 0},
		{"variables matter", `\boxed{2y+3}`, "2x+3", 0},
		{"rational function", `\boxed{\frac{-x-1}{1-x}}`, `\frac{x+1}{x-1}`, 1},
		{"trig identity", `\boxed{\sin^2 x + \cos^2 x}`, "1", 1},
		{"cube root", `\boxed{\sqrt[3]{x}}`, `x^{1/3}`, 1},
		{"binomial", `\boxed{\binom{n}{2}}`, `\frac{n(n-1)}{2}`, 1},
		// Evaluation.
		{"scientific notation", `\boxed{1.5 \times 10^{3}}`, "1500", 1},
		{"power of ten", `\boxed{10^3}`, "1000", 1},
		{"power of two", `\boxed{2^{10}}`, "1024", 1},
		{"power off by one", `\boxed{2^{11}}`, "1024", 0},
		{"negative exponent", `\boxed{1.5\times10^{-3}}`, "0.0015", 1},
		{"factorial", `\boxed{5!}`, "120", 1},
		{"binomial number", `\boxed{\binom{5}{2}}`, "10", 1},
		{"logarithm", `\boxed{\log_2 8}`, "3", 1},
		{"base 10 logarithm", `\boxed{\log 100}`, "2", 1},
		{"ratio", `\boxed{3:2}`, `\frac{3}{2}`, 1},
		// Units, choices, intervals, sets, tuples, matrices.
		{"unit with exponent", `\boxed{24\text{ cm}^2}`, "24", 1},
		{"unit word", `\boxed{90 degrees}`, "90", 1},
		{"unit words after a number", `\boxed{18 dollars}`, "18", 1},
		{"degrees", `\boxed{45^{\circ}}`, "45", 1},
		{"abbreviated unit", `\boxed{5cm}`, "5", 1},
		{"letters are not units", `\boxed{2xy}`, "2", 0},
		{"spaced letters are not units", `\boxed{2 xy}`, "2", 0},
		{"one letter is not a unit", `\boxed{5 m}`, "5", 0},
		{"absolute value", `\boxed{|x|}`, "x", 0},
		{"choice in text", `\boxed{\text{(B)}}`, `\boxed{B}`, 1},
		{"choice letter", `\boxed{(C)}`, "C", 1},
		{"other choice", `\boxed{D}`, `\boxed{C}`, 0},
		{"interval membership", `\boxed{x \in [2, 5]}`, "[2,5]", 1},
		{"half-open interval", `\boxed{[2, 5)}`, "[2,5]", 0},
		{"inequality as interval", `\boxed{(-\infty, 3)}`, "x<3", 1},
		{"interval reference, inequality answer", `\boxed{x < 3}`, `(-\infty, 3)`, 0},
		{"union reordered", `\boxed{(2,\infty)\cup(-\infty,1)}`, `(-\infty,1)\cup(2,\infty)`, 1},
		{"set order", `\boxed{\{3,2,1\}}`, `\{1,2,3\}`, 1},
		{"list order", `\boxed{3, -2}`, "-2, 3", 1},
		{"plus minus", `\boxed{2+\sqrt{3}, 2-\sqrt{3}}`, `2\pm\sqrt{3}`, 1},
		{"tuple order", `\boxed{(2,1)}`, "(1,2)", 0},
		{"tuple", `\boxed{\left(\frac12, 3\right)}`, "(0.5, 3)", 1},
		{"matrix", `\boxed{\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}}`, `\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}`, 1},
		{"matrix transposed", `\boxed{\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}}`, `\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}`, 0},
		{"empty set", `\boxed{\varnothing}`, `\emptyset`, 1},
		{"reals", `\boxed{\mathbb{R}}`, `(-\infty, \infty)`, 1},
		// Equations.
		{"assignment answer", `\boxed{x = 3}`, "3", 1},
		{"assignment reference", `\boxed{3}`, "x = 3", 1},
		{"other variable", `\boxed{y = 3}`, "x = 3", 0},
		{"line rearranged", `\boxed{2x - y + 1 = 0}`, "y = 2x + 1", 1},
		{"line differs", `\boxed{y = 2x - 1}`, "y = 2x + 1", 0},
		{"unparsed left side", `So $\int_0^2 x^2\,dx = \frac{8}{3}$.`, `\frac{8}{3}`, 1},
		// Percentages.
		{"percent and hundredth", "The discount is 25%.", "#### 0.25", 1},
		{"decimal percent and hundredth", "The rate is 12.5%.", "#### 0.125", 1},
		{"percent wrong", "The answer is 40%.", "#### 0.04", 0},
		// References that are sentences.
		{"reference sentence", "#### 72", "The answer is 72", 1},
		{"reference in words", `\boxed{\text{Yes}}`, "yes", 1},
	}
	for _, tc := range tests {
		if got := f(tc.completion, Example{Answer: tc.answer}); got != tc.want {
			p, _ := ExtractAnswer(tc.completion)
			t.Errorf("%s: math(%q, answer %q) = %v, want %v (extracted %q, reference %q)",
				tc.name, tc.completion, tc.answer, got, tc.want, p, referenceAnswer(tc.answer))
		}
	}
}

// TestMathDivergesFromMathVerify pins where stx deliberately accepts a
// correct answer that Math-Verify 0.9.0 scores 0 (its verdict in the
// comment): these cannot be in the Math-Verify table, whose rule is that
// stx never scores 1 where Math-Verify scores 0.
func TestMathDivergesFromMathVerify(t *testing.T) {
	f, _ := NewRewardFunc(schema.Reward{Fn: "math", Tolerance: 1e-6})
	for _, tc := range []struct{ why, completion, answer string }{
		// Math-Verify reads the 4 of the <think> block: it knows no tags.
		{"answer tag", "<think>2 + 2 = 4</think>\n<answer>72</answer>", "72"},
		// Math-Verify takes the last number of the text, 3.
		{"gsm8k marker then prose", "#### 72\nThat took 3 steps.", "#### 72"},
		// Math-Verify reads a bare LaTeX reference as its first number, 2.
		{"bare LaTeX reference", `\boxed{\sqrt{12}}`, `2\sqrt{3}`},
		// Math-Verify reads 18·a·do·l·l·r·s.
		{"unit words in a box", `\boxed{18 dollars}`, "#### 18"},
		// Math-Verify's expression reader takes "1/2**." for 1/2^0.
		{"bold fraction", "Therefore, the answer is **1/2**.", "#### 0.5"},
		// Math-Verify reads \log_e 2 as 2.
		{"log base e", `\boxed{\log_e 2}`, `\boxed{\ln 2}`},
		// Math-Verify takes the principal (complex) cube root.
		{"real cube root", `\boxed{\sqrt[3]{-8}}`, `\boxed{-2}`},
		// Math-Verify strips " c" as a unit (centuries?), leaving "a + b +".
		{"c is not a unit", `\boxed{a + b + c}`, `\boxed{a+b+c}`},
		// Math-Verify makes i a real symbol in 2i and a complex one alone.
		{"imaginary unit", `\boxed{i \cdot 2}`, `\boxed{2i}`},
		// Math-Verify knows \emptyset but not \varnothing.
		{"varnothing", `\boxed{\varnothing}`, `\boxed{\emptyset}`},
		// Math-Verify finds no answer in a reference of words.
		{"words", `\boxed{\text{Yes}}`, "yes"},
	} {
		if f(tc.completion, Example{Answer: tc.answer}) != 1 {
			p, _ := ExtractAnswer(tc.completion)
			t.Errorf("%s: math(%q, answer %q) = 0, want 1 (extracted %q, reference %q)",
				tc.why, tc.completion, tc.answer, p, referenceAnswer(tc.answer))
		}
	}
	// And where Math-Verify scores 1 a wrong answer, stx does not: it
	// strips t, m, s, … after a number as units.
	for _, tc := range []struct{ completion, answer string }{
		{`\boxed{2t}`, `\boxed{2}`},
		{`\boxed{5m}`, `\boxed{5}`},
	} {
		if f(tc.completion, Example{Answer: tc.answer}) != 0 {
			t.Errorf("math(%q, answer %q) = 1, want 0", tc.completion, tc.answer)
		}
	}
}

// TestMathTolerance: the tolerance applies to numbers written with a
// decimal point; exact forms compare exactly.
func TestMathTolerance(t *testing.T) {
	for _, tc := range []struct {
		tol       float64
		pred, ref string
		want      bool
		why       string
	}{
		{1e-6, "0.333333", `\frac{1}{3}`, true, "six decimals of 1/3"},
		{1e-6, "0.333", `\frac{1}{3}`, false, "three decimals"},
		{1e-6, "3.14", `\pi`, false, "pi to two decimals"},
		{1e-6, "3.14159265", `\pi`, true, "pi to eight decimals"},
		{1e-6, "1.414214", `\sqrt{2}`, true, "root 2 to six decimals"},
		{0.01, "0.667", "2/3", true, "loose tolerance"},
		{0.01, "19.005", "19", true, "loose tolerance, integer reference"},
		{0.01, "19.02", "19", false, "outside the tolerance"},
		{0.5, `10^{-7}`, "0", false, "exact forms compare exactly"},
		{0.5, "20", "19", false, "integers compare exactly"},
		{1e-6, `6.67\times10^{-10}`, `6.67\times10^{-11}`, false, "scientific notation compares exactly"},
		{1e-6, `\frac{2}{3}`, "0.6666667", true, "reference with decimals"},
		{1e-6, "12.5%", "0.125", true, "percentage of a decimal"},
	} {
		if got := MathEqual(tc.pred, tc.ref, tc.tol); got != tc.want {
			t.Errorf("%s: MathEqual(%q, %q, %g) = %v, want %v", tc.why, tc.pred, tc.ref, tc.tol, got, tc.want)
		}
	}
}

// TestMathParse reads answers into values and rejects what is not one.
func TestMathParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind valKind
	}{
		{"3", vScalar},
		{`\frac{1}{2}`, vScalar},
		{`1,000`, vScalar},
		{`1, 2`, vList},
		{`\{1, 2\}`, vSet},
		{`(1, 2)`, vPair},
		{`(1, 2, 3)`, vTuple},
		{`[1, 2)`, vInterval},
		{`\left( -\infty, 2 \right]`, vInterval},
		{`(1,2)\cup(3,4)`, vUnion},
		{`\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}`, vMatrix},
		{`x = 3`, vRel},
		{`1 < x \le 2`, vRel},
		{`2 \pm \sqrt{3}`, vSet},
		{`\text{(B)}`, vScalar},
		{`5\text{ cm}^2`, vScalar},
	} {
		v, err := parseAnswer(tc.in)
		if err != nil || v.kind != tc.kind {
			t.Errorf("parseAnswer(%q) = %v, %v; want kind %d", tc.in, v, err, tc.kind)
		}
	}
	for _, in := range []string{"", "$$", `\frac{1}`, "(1, 2", `\unknowncommand`, "1 +", "x ∈ ☃", `\begin{pmatrix} 1 & 2 \\ 3 \end{pmatrix}`,
		strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000)} {
		if v, err := parseAnswer(in); err == nil {
			t.Errorf("parseAnswer(%q) = %+v, want an error", in, v)
		}
	}
	// Exact values.
	for in, want := range map[string]string{
		`1.5 \times 10^{3}`: "1500", `2^{10}`: "1024", `\sqrt{16}`: "4", `\sqrt[3]{-8}`: "-2", `2\frac{1}{2}`: "5/2",
		`-2\frac{1}{3}`: "-7/3", "2 1/2": "5/2", `25\%`: "1/4", `\binom{6}{3}`: "20", `\log_2 \frac{1}{8}`: "-3", "12:30": "2/5",
		`|-3|`: "3", `\lfloor 2.5 \rfloor`: "2", `\lceil 2.5 \rceil`: "3", `1011_2`: "1011", `\frac{0.5}{2}`: "1/4",
	} {
		v, err := parseAnswer(in)
		if err != nil || v.kind != vScalar {
			t.Errorf("parseAnswer(%q) = %v, %v", in, v, err)
			continue
		}
		if r, ok := exactValue(v.x); !ok || r.RatString() != want {
			t.Errorf("exact value of %q = %v, %v; want %s", in, r, ok, want)
		}
	}
}

// TestFinalNumberExpressions: numeric_match reads a final answer that is
// a constant expression by its value.
func TestFinalNumberExpressions(t *testing.T) {
	for in, want := range map[string]float64{
		`\boxed{2^{10}}`: 1024, `\boxed{1.5 \times 10^{3}}`: 1500, `\boxed{x = 4}`: 4, `\boxed{\frac{3}{4}}`: 0.75,
		"#### 50%": 50, "The answer is 72.\n\nNote: 2 steps": 72, "#### 2 1/2": 2.5,
	} {
		if got, ok := FinalNumber(in); !ok || math.Abs(got-want) > 1e-12 {
			t.Errorf("FinalNumber(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{`\boxed{x+1}`, `\boxed{(1,2)}`, "1e999", "no number"} {
		if got, ok := FinalNumber(in); ok {
			t.Errorf("FinalNumber(%q) = %v, want none", in, got)
		}
	}
}

// FuzzMathEqual feeds arbitrary answers to the grader: no panic, and an
// answer equals itself.
func FuzzMathEqual(f *testing.F) {
	for _, s := range []string{`\boxed{\frac{1}{2}}`, "#### 1,000", `x^2+2x+1`, `(1, 2]`, `\{1, 2\}`, `\begin{pmatrix}1\\2\end{pmatrix}`,
		"The answer is 40 minutes", `\sqrt[3]{x}`, `2\pm\sqrt3`, `x \in [2,5]`, `\text{(B)}`, `5!`, `\binom{n}{2}`, `|x|`, "1 < x < 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 400 {
			return
		}
		ExtractAnswer(s)
		referenceAnswer(s)
		FinalNumber(s)
		if answerText(s) != "" && strings.TrimSpace(s) != "" && !MathEqual(s, s, 1e-6) {
			t.Fatalf("MathEqual(%q, itself) = false", s)
		}
	})
}
