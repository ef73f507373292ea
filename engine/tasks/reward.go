package tasks

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
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
	"regex":          buildRegex,
	"format":         buildFormat,
	"length_penalty": buildLengthPenalty,
}

// RewardNames are the reward function names, in the schema's order.
func RewardNames() []string {
	return []string{"exact_match", "numeric_match", "regex", "format", "length_penalty"}
}

// NewRewardFunc builds the unweighted function of one reward term:
//
//   - exact_match: 1 when the completion equals the example's Answer after
//     trimming surrounding whitespace from both, else 0;
//   - numeric_match: 1 when the first number in the completion is within
//     tolerance (absolute) of the first number in the Answer, else 0 (also
//     when either has none). Numbers are decimal, optionally signed, with
//     an optional fraction and exponent; U+2212 (−) counts as a minus sign;
//     a thousands separator ends a number ("1,000" reads 1);
//   - regex: 1 when pattern (RE2 syntax) matches somewhere, else 0;
//   - format: 1 when pattern matches the whole completion, else 0;
//   - length_penalty: −scale·|len − target_length|/target_length, where len
//     counts characters (code points), the same for every tokenizer.
//
// Bad patterns, a missing target_length and negative or non-finite
// parameters are errors.
func NewRewardFunc(term schema.Reward) (RewardFunc, error) {
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
		x, ok1 := FirstNumber(c)
		a, ok2 := FirstNumber(ex.Answer)
		return indicator(ok1 && ok2 && math.Abs(x-a) <= tol)
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

// numberRE matches a decimal number: sign, digits with an optional
// fraction (or a bare fraction), optional exponent.
var numberRE = regexp.MustCompile(`[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?`)

// FirstNumber parses the first number in s (see NewRewardFunc for the
// syntax); false when s has none. Out-of-range values are ±Inf.
func FirstNumber(s string) (float64, bool) {
	s = strings.ReplaceAll(s, "\u2212", "-")
	m := numberRE.FindString(s)
	if m == "" {
		return 0, false
	}
	x, err := strconv.ParseFloat(m, 64)
	var ne *strconv.NumError
	if err != nil && !(errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange)) {
		return 0, false // unreachable for strings numberRE matched
	}
	return x, true
}

// Reward scores completions with a recipe's weighted reward terms and
// tells whether they are correct by the task's own test.
type Reward struct {
	terms   []RewardFunc
	weights []float64
	correct RewardFunc
	points  PointScorer
}

// NewReward builds the reward of a recipe's task section for task:
// the weighted sum of terms, or the task's default reward when terms is
// empty (Rewarded.DefaultReward: numeric_match for arithmetic, exact_match
// for sorting, reverse and JSONL; exact_match for a nil task or one without
// a default). Correctness is always the default term's test (its value is
// 1), independent of shaping terms. Weights are used as given (a term
// built in Go without one weighs 0; recipes get the schema's 1.0).
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
			return nil, fmt.Errorf("reward term %d (%s): weight %g is not finite", i, term.Fn, term.Weight)
		}
		f, err := NewRewardFunc(term)
		if err != nil {
			return nil, fmt.Errorf("reward term %d: %w", i, err)
		}
		r.terms = append(r.terms, f)
		r.weights = append(r.weights, term.Weight)
	}
	return r, nil
}

// Score returns the weighted reward of a completion of ex and whether it
// is correct by the task's default test.
func (r *Reward) Score(completion string, ex Example) (reward float64, correct bool) {
	if r.points != nil {
		return 0, false
	}
	for i, f := range r.terms {
		reward += r.weights[i] * f(completion, ex)
	}
	return reward, r.correct(completion, ex) == 1
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
