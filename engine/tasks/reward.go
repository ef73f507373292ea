package tasks

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"

	"stx.dev/stx/schema"
)

// RewardFunc scores one completion of an example, unweighted.
type RewardFunc func(completion string, ex Example) float64

// rewardBuilders turn a schema reward term into its function; the names
// are the schema's #Reward.fn values. Read-only after initialisation.
var rewardBuilders = map[string]func(schema.Reward) (RewardFunc, error){
	"exact_match":    buildExactMatch,
	"numeric_match":  buildNumericMatch,
	"math":           buildMath,
	"contains":       buildContains,
	"regex":          buildRegex,
	"format":         buildFormat,
	"think_format":   buildThinkFormat,
	"length_penalty": buildLengthPenalty,
}

// externalBuilders start the rewards computed outside stx (external.go).
var externalBuilders = map[string]func(schema.Reward) (BatchScorer, error){
	"command": newCommandScorer,
	"http":    newHTTPScorer,
}

// RewardNames are the reward function names, in the schema's order.
func RewardNames() []string {
	return []string{"exact_match", "numeric_match", "math", "contains", "regex", "format",
		"think_format", "length_penalty", "command", "http"}
}

// BatchScorer is a reward computed outside stx: it scores a batch of
// completions at once and holds a resource (a process, a connection pool)
// that Close releases.
type BatchScorer interface {
	// ScoreBatch returns one unweighted reward per completion.
	ScoreBatch(completions []string, exs []Example) ([]float64, error)
	Close() error
}

// NewRewardFunc builds the unweighted function of one reward term:
//
//   - exact_match: 1 when the completion equals the example's Answer after
//     trimming surrounding whitespace from both, else 0;
//   - numeric_match: 1 when the completion's final answer (ExtractAnswer:
//     the <answer> block, the last \boxed{…}, an "answer is" phrase, the
//     text after GSM8K's "####", else the last math or number) read as a
//     number (constant LaTeX expressions included) is within tolerance
//     (absolute) of the Answer's, else 0 (also when either has none);
//   - math: 1 when the completion's final answer equals the Answer's as
//     Math-Verify judges it (MathEqual: expression trees compared exactly
//     in rationals, at seeded random points with variables; sets,
//     intervals, tuples, choices, units, percentages; tolerance on numbers
//     written with a decimal point), else 0;
//   - contains: 1 when the completion contains pattern, or the trimmed
//     Answer when pattern is empty, else 0;
//   - regex: 1 when pattern (RE2 syntax) matches somewhere, else 0;
//   - format: 1 when pattern matches the whole completion, else 0;
//   - think_format: 1 when the completion is "<think>…</think>" then
//     "<answer>…</answer>" (whitespace around and between allowed), else 0;
//   - length_penalty: −scale·|len − target_length|/target_length, where len
//     counts characters (code points), the same for every tokenizer.
//
// Bad patterns, a missing target_length and negative or non-finite
// parameters are errors.
func NewRewardFunc(term schema.Reward) (RewardFunc, error) {
	if _, ok := externalBuilders[term.Fn]; ok {
		return nil, fmt.Errorf("reward %s is external: build it with NewReward", term.Fn)
	}
	b, ok := rewardBuilders[term.Fn]
	if !ok {
		return nil, fmt.Errorf("unknown reward function %q (known: %s)", term.Fn, strings.Join(RewardNames(), ", "))
	}
	f, err := b(term)
	if err != nil {
		return nil, fmt.Errorf("reward %s: %w", term.Fn, err)
	}
	return f, nil
}

func buildExactMatch(schema.Reward) (RewardFunc, error) {
	return func(c string, ex Example) float64 {
		return indicator(strings.TrimSpace(c) == strings.TrimSpace(ex.Answer))
	}, nil
}

func buildNumericMatch(term schema.Reward) (RewardFunc, error) {
	tol := term.Tolerance
	if !(tol >= 0) || math.IsInf(tol, 0) {
		return nil, fmt.Errorf("tolerance %g must be finite and ≥ 0", tol)
	}
	return func(c string, ex Example) float64 {
		x, ok1 := FinalNumber(c)
		a, ok2 := FinalNumber(ex.Answer)
		return indicator(ok1 && ok2 && math.Abs(x-a) <= tol)
	}, nil
}

func buildMath(term schema.Reward) (RewardFunc, error) {
	tol := term.Tolerance
	if !(tol >= 0) || math.IsInf(tol, 0) {
		return nil, fmt.Errorf("tolerance %g must be finite and ≥ 0", tol)
	}
	return func(c string, ex Example) float64 {
		pred, ok := ExtractAnswer(c)
		return indicator(ok && MathEqual(pred, referenceAnswer(ex.Answer), tol))
	}, nil
}

func buildContains(term schema.Reward) (RewardFunc, error) {
	want := term.Pattern
	return func(c string, ex Example) float64 {
		w := want
		if w == "" {
			if w = strings.TrimSpace(ex.Answer); w == "" {
				return 0
			}
		}
		return indicator(strings.Contains(c, w))
	}, nil
}

// thinkFormatRE is the think/answer template of reasoning recipes.
var thinkFormatRE = regexp.MustCompile(`(?s)\A\s*<think>.*?</think>\s*<answer>.*?</answer>\s*\z`)

func buildThinkFormat(schema.Reward) (RewardFunc, error) {
	return func(c string, _ Example) float64 {
		// One block each: a second <answer> would make the parse ambiguous.
		return indicator(thinkFormatRE.MatchString(c) && strings.Count(c, "<answer>") == 1 && strings.Count(c, "<think>") == 1)
	}, nil
}

func buildRegex(term schema.Reward) (RewardFunc, error) {
	re, err := regexp.Compile(term.Pattern)
	if err != nil {
		return nil, fmt.Errorf("bad pattern %q: %w", term.Pattern, err)
	}
	return func(c string, _ Example) float64 { return indicator(re.MatchString(c)) }, nil
}

func buildFormat(term schema.Reward) (RewardFunc, error) {
	if _, err := regexp.Compile(term.Pattern); err != nil {
		return nil, fmt.Errorf("bad pattern %q: %w", term.Pattern, err)
	}
	// \A and \z anchor at the text's ends whatever flags the pattern sets
	// (^ and $ would match at line ends under (?m)).
	re := regexp.MustCompile(`\A(?:` + term.Pattern + `)\z`)
	return func(c string, _ Example) float64 { return indicator(re.MatchString(c)) }, nil
}

func buildLengthPenalty(term schema.Reward) (RewardFunc, error) {
	if term.TargetLength < 1 {
		return nil, fmt.Errorf("target_length %d must be ≥ 1", term.TargetLength)
	}
	if !(term.Scale >= 0) || math.IsInf(term.Scale, 0) {
		return nil, fmt.Errorf("scale %g must be finite and ≥ 0", term.Scale)
	}
	target, scale := float64(term.TargetLength), term.Scale
	return func(c string, _ Example) float64 {
		return -scale * math.Abs(float64(utf8.RuneCountInString(c))-target) / target
	}, nil
}

func indicator(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// FinalNumber is the value of s's final answer (ExtractAnswer) read as a
// number (normalised as MathEqual does; "50%" reads 50); false when s has
// no answer or it is not a number.
func FinalNumber(s string) (float64, bool) {
	a, ok := ExtractAnswer(s)
	if !ok {
		return 0, false
	}
	v, _, ok := parseMathNumber(normalizeMath(a))
	return v, ok
}

// verifiedByTerms is implemented by tasks whose correctness test is the
// recipe's first verifier term when it has one (the datasets).
type verifiedByTerms interface{ verifiedByTerms() }

// verifiers are the reward functions that say right or wrong about the
// answer itself (not its form or length).
var verifiers = map[string]bool{"exact_match": true, "numeric_match": true, "math": true, "contains": true}

// Reward scores completions with a recipe's weighted reward terms and
// tells whether they are correct by the task's own test.
type Reward struct {
	terms   []rewardTerm
	correct RewardFunc
	points  PointScorer
}

// rewardTerm is one weighted term: a function of one completion, or an
// external scorer of batches.
type rewardTerm struct {
	fn     string
	weight float64
	local  RewardFunc
	batch  BatchScorer
}

// NewReward builds the reward of a recipe's task section for task:
// the weighted sum of terms, or the task's default reward when terms is
// empty (Rewarded.DefaultReward: numeric_match for arithmetic, exact_match
// for sorting, reverse and the datasets; exact_match for a nil task or one
// without a default). Correctness is the default term's test (its value is
// 1), independent of shaping terms; a dataset, which has no test of its
// own, takes the first of exact_match, numeric_match, math or contains
// among the terms when there is one. Weights are used as given (a
// term built in Go without one weighs 0; recipes get the schema's 1.0).
//
// External terms (command, http) start here: the command's process is
// started once and serves the whole run; Close stops it.
//
// A continuous task (a PointScorer such as mixture2d) takes no terms: its
// reward is ScorePoint, and Score of a text completion is (0, false).
func NewReward(terms []schema.Reward, task Task) (*Reward, error) {
	if ps, ok := task.(PointScorer); ok {
		if len(terms) > 0 {
			return nil, fmt.Errorf("task %q scores generated points; reward functions %q… do not apply", task.Name(), terms[0].Fn)
		}
		return &Reward{points: ps}, nil
	}
	def := exactMatch
	if rt, ok := task.(Rewarded); ok {
		def = rt.DefaultReward()
	}
	if def.Fn == "length_penalty" {
		return nil, fmt.Errorf("task %q: default reward length_penalty has no notion of correct", task.Name())
	}
	if _, ok := task.(verifiedByTerms); ok {
		// A dataset has no test of its own: the recipe's first verifier
		// term (math on GSM8K, say) decides what is correct.
		for _, t := range terms {
			if verifiers[t.Fn] {
				def = t
				break
			}
		}
	}
	correct, err := NewRewardFunc(def)
	if err != nil {
		return nil, fmt.Errorf("default reward: %w", err)
	}
	r := &Reward{correct: correct}
	if len(terms) == 0 {
		terms = []schema.Reward{def}
	}
	for i, term := range terms {
		if math.IsNaN(term.Weight) || math.IsInf(term.Weight, 0) {
			r.Close()
			return nil, fmt.Errorf("reward term %d (%s): weight %g is not finite", i, term.Fn, term.Weight)
		}
		t := rewardTerm{fn: term.Fn, weight: term.Weight}
		if b, ok := externalBuilders[term.Fn]; ok {
			t.batch, err = b(term)
		} else {
			t.local, err = NewRewardFunc(term)
		}
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("reward term %d: %w", i, err)
		}
		r.terms = append(r.terms, t)
	}
	return r, nil
}

// Score returns the weighted reward of a completion of ex and whether it
// is correct by the task's default test. It is ScoreBatch of one
// completion; an external term's error makes the reward NaN (use
// ScoreBatch to see the error).
func (r *Reward) Score(completion string, ex Example) (reward float64, correct bool) {
	if r.points != nil {
		return 0, false
	}
	rs, cs, err := r.ScoreBatch([]string{completion}, []Example{ex})
	if err != nil {
		return math.NaN(), false
	}
	return rs[0], cs[0]
}

// ScoreBatch scores completions[i] of exs[i]: the weighted rewards and the
// default test's verdicts. External terms see the whole batch in one call
// (one HTTP request per batch_size, the command's requests pipelined).
func (r *Reward) ScoreBatch(completions []string, exs []Example) (rewards []float64, correct []bool, err error) {
	rewards, correct, _, err = r.ScoreTerms(completions, exs)
	return rewards, correct, err
}

// ScoreTerms is ScoreBatch that also returns each term's unweighted values
// (terms[j][i] is term j of completion i; TermNames names them).
func (r *Reward) ScoreTerms(completions []string, exs []Example) (rewards []float64, correct []bool, terms [][]float64, err error) {
	if len(completions) != len(exs) {
		return nil, nil, nil, fmt.Errorf("score: %d completions for %d examples", len(completions), len(exs))
	}
	rewards = make([]float64, len(completions))
	correct = make([]bool, len(completions))
	if r.points != nil {
		return rewards, correct, nil, nil
	}
	for _, t := range r.terms {
		vs := make([]float64, len(completions))
		if t.batch != nil {
			if vs, err = t.batch.ScoreBatch(completions, exs); err != nil {
				return nil, nil, nil, fmt.Errorf("reward %s: %w", t.fn, err)
			}
			if len(vs) != len(completions) {
				return nil, nil, nil, fmt.Errorf("reward %s: %d rewards for %d completions", t.fn, len(vs), len(completions))
			}
		} else {
			for i, c := range completions {
				vs[i] = t.local(c, exs[i])
			}
		}
		for i, v := range vs {
			rewards[i] += t.weight * v
		}
		terms = append(terms, vs)
	}
	for i, c := range completions {
		correct[i] = r.correct(c, exs[i]) == 1
	}
	return rewards, correct, terms, nil
}

// TermNames name the reward's terms for metrics: the function names, with
// "_2", "_3", … on repeats ("regex", "regex_2").
func (r *Reward) TermNames() []string {
	seen := map[string]int{}
	names := make([]string, len(r.terms))
	for j, t := range r.terms {
		seen[t.fn]++
		names[j] = t.fn
		if n := seen[t.fn]; n > 1 {
			names[j] = fmt.Sprintf("%s_%d", t.fn, n)
		}
	}
	return names
}

// Close releases the external terms (stops reward commands). It is safe to
// call more than once and on a reward without external terms.
func (r *Reward) Close() error {
	var errs []error
	for _, t := range r.terms {
		if t.batch != nil {
			errs = append(errs, t.batch.Close())
		}
	}
	return errors.Join(errs...)
}

// Continuous reports whether the reward scores points (ScorePoint) rather
// than text.
func (r *Reward) Continuous() bool { return r.points != nil }

// ScorePoint scores a generated point of a continuous task; it is an error
// on a text task's reward.
func (r *Reward) ScorePoint(p []float32) (float64, bool, error) {
	if r.points == nil {
		return 0, false, errors.New("ScorePoint on the reward of a text task")
	}
	return r.points.ScorePoint(p)
}
