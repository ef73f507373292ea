package tasks

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"stx.dev/stx/schema"
)

// The synthetic text tasks are sized for a tiny byte-level model: prompts
// and answers of a few to ~20 bytes, so that a handful of new tokens holds
// an answer (arithmetic answers fit in 8 with the default difficulty).

// ArithmeticConfig sets the difficulty of the arithmetic task.
type ArithmeticConfig struct {
	// Digits is the most digits of an operand: operands are drawn
	// uniformly from 0 … 10^Digits−1. Default 2 (1–2 digit operands);
	// at most 9.
	Digits int
	// Ops are the operators drawn uniformly, a subset of "+-*".
	// Default "+-".
	Ops string
	// AllowNegative lets subtraction give negative results; by default
	// the larger operand comes first.
	AllowNegative bool
}

// SortingConfig sets the size of the sorting task's lists.
type SortingConfig struct {
	// MinLen and MaxLen bound how many single digits a list has.
	// Defaults 3 and 5; MinLen at least 2, MaxLen at most 9.
	MinLen, MaxLen int
}

// ReverseConfig sets the size of the reverse task's strings.
type ReverseConfig struct {
	// MinLen and MaxLen bound the length of the lowercase string.
	// Defaults 3 and 6; MinLen at least 2, MaxLen at most 12.
	MinLen, MaxLen int
}

// problem is one generated item: its prompt, the right answer and a
// plausible wrong one (the rejected completion of preference data).
type problem struct{ prompt, answer, wrong string }

// textTask is a synthetic text task with materialised splits.
type textTask struct {
	name       string
	train, val []Example
	reward     schema.Reward
	capacity   uint64 // distinct prompts the configuration can generate
}

func (t *textTask) Name() string                 { return t.name }
func (t *textTask) Kinds() []Kind                { return slices.Clone(textKinds) }
func (t *textTask) Train() []Example             { return slices.Clone(t.train) }
func (t *textTask) Validation() []Example        { return slices.Clone(t.val) }
func (t *textTask) DefaultReward() schema.Reward { return t.reward }

// exactMatch and numericMatch are the default reward terms of the
// synthetic tasks (schema defaults for weight, tolerance and scale).
var (
	exactMatch   = schema.Reward{Fn: "exact_match", Weight: 1, Tolerance: 1e-6, Scale: 1}
	numericMatch = schema.Reward{Fn: "numeric_match", Weight: 1, Tolerance: 1e-6, Scale: 1}
)

// NewArithmetic builds the arithmetic task: "12+7=" → "19".
func NewArithmetic(cfg ArithmeticConfig, trainSize, valSize, seed int) (Task, error) {
	if cfg.Digits == 0 {
		cfg.Digits = 2
	}
	if cfg.Ops == "" {
		cfg.Ops = "+-"
	}
	if cfg.Digits < 1 || cfg.Digits > 9 {
		return nil, fmt.Errorf("arithmetic: digits %d outside 1…9", cfg.Digits)
	}
	for _, op := range cfg.Ops {
		if !strings.ContainsRune("+-*", op) {
			return nil, fmt.Errorf("arithmetic: operator %q not one of + - *", op)
		}
	}
	n := uint64(math.Pow10(cfg.Digits))
	var capacity uint64
	for _, op := range cfg.Ops {
		if op == '-' && !cfg.AllowNegative {
			capacity += n * (n + 1) / 2
		} else {
			capacity += n * n
		}
	}
	gen := func(r *rand.Rand) problem {
		a, b := r.Int64N(int64(n)), r.Int64N(int64(n))
		op := cfg.Ops[r.IntN(len(cfg.Ops))]
		if op == '-' && !cfg.AllowNegative && a < b {
			a, b = b, a
		}
		ans := apply(op, a, b)
		// Plausible mistakes: off by one in the last or the tens digit,
		// or the other operator's result.
		cands := []int64{ans + 1, ans - 1, ans + 10, ans - 10}
		for _, o := range cfg.Ops {
			cands = append(cands, apply(byte(o), a, b))
		}
		var wrong []string
		for _, c := range cands {
			if c != ans && (c >= 0 || cfg.AllowNegative) {
				wrong = append(wrong, strconv.FormatInt(c, 10))
			}
		}
		return problem{
			prompt: fmt.Sprintf("%d%c%d=", a, op, b),
			answer: strconv.FormatInt(ans, 10),
			wrong:  pick(r, wrong),
		}
	}
	return buildText("arithmetic", gen, capacity, trainSize, valSize, seed, numericMatch)
}

func apply(op byte, a, b int64) int64 {
	switch op {
	case '+':
		return a + b
	case '-':
		return a - b
	default:
		return a * b
	}
}

// NewSorting builds the sorting task: "sort 3 1 2:" → "1 2 3".
func NewSorting(cfg SortingConfig, trainSize, valSize, seed int) (Task, error) {
	if cfg.MinLen == 0 && cfg.MaxLen == 0 {
		cfg.MinLen, cfg.MaxLen = 3, 5
	}
	// A list needs two digits for a wrong answer that is not empty.
	if cfg.MinLen < 2 || cfg.MaxLen < cfg.MinLen || cfg.MaxLen > 9 {
		return nil, fmt.Errorf("sorting: lengths %d…%d outside 2…9", cfg.MinLen, cfg.MaxLen)
	}
	var capacity uint64
	for l := cfg.MinLen; l <= cfg.MaxLen; l++ {
		capacity += uint64(math.Pow10(l))
	}
	gen := func(r *rand.Rand) problem {
		xs := make([]byte, cfg.MinLen+r.IntN(cfg.MaxLen-cfg.MinLen+1))
		for i := range xs {
			xs[i] = byte('0' + r.IntN(10))
		}
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		// Plausible mistakes: one adjacent pair out of order, the list
		// left as given, sorted descending, an element lost.
		var wrong [][]byte
		if i, ok := adjacentDiff(r, sorted); ok {
			w := slices.Clone(sorted)
			w[i], w[i+1] = w[i+1], w[i]
			wrong = append(wrong, w)
		}
		desc := slices.Clone(sorted)
		slices.Reverse(desc)
		wrong = append(wrong, xs, desc, sorted[:len(sorted)-1])
		var ws []string
		for _, w := range wrong {
			if !slices.Equal(w, sorted) {
				ws = append(ws, spaced(w))
			}
		}
		return problem{prompt: "sort " + spaced(xs) + ":", answer: spaced(sorted), wrong: pick(r, ws)}
	}
	return buildText("sorting", gen, capacity, trainSize, valSize, seed, exactMatch)
}

// spaced writes single digits separated by spaces.
func spaced(xs []byte) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte(x)
	}
	return b.String()
}

// NewReverse builds the string reversal task: "reverse abc:" → "cba".
func NewReverse(cfg ReverseConfig, trainSize, valSize, seed int) (Task, error) {
	if cfg.MinLen == 0 && cfg.MaxLen == 0 {
		cfg.MinLen, cfg.MaxLen = 3, 6
	}
	// A string needs two letters for a wrong answer that is not empty.
	if cfg.MinLen < 2 || cfg.MaxLen < cfg.MinLen || cfg.MaxLen > 12 {
		return nil, fmt.Errorf("reverse: lengths %d…%d outside 2…12", cfg.MinLen, cfg.MaxLen)
	}
	var capacity uint64
	for l := cfg.MinLen; l <= cfg.MaxLen; l++ {
		capacity += uint64(math.Pow(26, float64(l)))
	}
	gen := func(r *rand.Rand) problem {
		s := make([]byte, cfg.MinLen+r.IntN(cfg.MaxLen-cfg.MinLen+1))
		for i := range s {
			s[i] = byte('a' + r.IntN(26))
		}
		rev := slices.Clone(s)
		slices.Reverse(rev)
		// Plausible mistakes: the string copied unreversed, one adjacent
		// pair swapped, a partial reversal (only a suffix reversed, the
		// prefix left in order), the last character lost.
		wrong := [][]byte{s, rev[:len(rev)-1]}
		if i, ok := adjacentDiff(r, rev); ok {
			w := slices.Clone(rev)
			w[i], w[i+1] = w[i+1], w[i]
			wrong = append(wrong, w)
		}
		if len(s) >= 2 {
			k := 1 + r.IntN(len(s)-1)
			w := slices.Clone(s[k:])
			slices.Reverse(w)
			wrong = append(wrong, append(w, s[:k]...))
		}
		var ws []string
		for _, w := range wrong {
			if string(w) != string(rev) {
				ws = append(ws, string(w))
			}
		}
		return problem{prompt: "reverse " + string(s) + ":", answer: string(rev), wrong: pick(r, ws)}
	}
	return buildText("reverse", gen, capacity, trainSize, valSize, seed, exactMatch)
}

// adjacentDiff picks a random i with xs[i] != xs[i+1]; false if none.
func adjacentDiff(r *rand.Rand, xs []byte) (int, bool) {
	var idx []int
	for i := 0; i+1 < len(xs); i++ {
		if xs[i] != xs[i+1] {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return 0, false
	}
	return idx[r.IntN(len(idx))], true
}

// pick draws one of the candidates. Every generator guarantees at least
// one candidate differs from the answer, so an empty list is a bug.
func pick(r *rand.Rand, cands []string) string {
	if len(cands) == 0 {
		panic("tasks: no wrong answer candidate")
	}
	return cands[r.IntN(len(cands))]
}

func sizeError(name string, trainSize, valSize int, capacity uint64) error {
	return fmt.Errorf("%s: train_size %d + validation_size %d exceed the %d distinct prompts of its configuration",
		name, trainSize, valSize, capacity)
}

// newRand returns the task's random stream: the seed picks the sequence,
// the task name a stream of its own, so two tasks with one seed differ.
func newRand(name string, seed int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), hash64("tasks", name)))
}

// buildText draws valSize then trainSize problems with distinct prompts.
// Validation comes first so that it does not change with train_size, and
// every prompt is drawn once, so the splits are disjoint.
func buildText(name string, gen func(*rand.Rand) problem, capacity uint64, trainSize, valSize, seed int, reward schema.Reward) (*textTask, error) {
	if trainSize < 1 || valSize < 1 {
		return nil, fmt.Errorf("%s: split sizes must be ≥ 1 (train %d, validation %d)", name, trainSize, valSize)
	}
	want := uint64(trainSize) + uint64(valSize)
	if want > capacity {
		return nil, sizeError(name, trainSize, valSize, capacity)
	}
	// The expected number of draws for n distinct items out of c is at
	// most c·(ln c + 1) (coupon collector); the bound only guards against
	// a generator that cannot reach its stated capacity.
	c := float64(min(capacity, 1<<24))
	maxDraws := 100*int(want) + int(20*c*(math.Log(c)+1))
	r := newRand(name, seed)
	seen := make(map[string]bool, want)
	draw := func(split string, n int) ([]Example, error) {
		out := make([]Example, 0, n)
		for len(out) < n {
			if maxDraws--; maxDraws < 0 {
				return nil, fmt.Errorf("%s: could not draw %d distinct prompts", name, want)
			}
			p := gen(r)
			if seen[p.prompt] {
				continue
			}
			seen[p.prompt] = true
			out = append(out, Example{
				ID:         fmt.Sprintf("%s/%s/%d", name, split, len(out)),
				Prompt:     p.prompt,
				Answer:     p.answer,
				Chosen:     p.answer,
				Rejected:   p.wrong,
				DataSource: name,
			})
		}
		return out, nil
	}
	val, err := draw("validation", valSize)
	if err != nil {
		return nil, err
	}
	train, err := draw("train", trainSize)
	if err != nil {
		return nil, err
	}
	return &textTask{name: name, train: train, val: val, reward: reward, capacity: capacity}, nil
}
