package serve

import (
	"container/heap"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
)

// Top-N log-probs (vLLM's logprobs: N and top_logprobs: N, SGLang's top_logprobs_num): the N
// most likely tokens of each position with their log-probs. The decoder keeps no
// alternatives while it samples, so they come from one forward pass over the prompt and the
// completion, after sampling, on the same weights (the request holds them): at each position
// the logits, log-softmaxed on the host with the temperature the token was sampled at (1 for
// prompt positions, and when greedy), as the sampled tokens' own log-probs are
// (docs/serve.md). They equal the decoder's within float rounding; the cost is one prefill of
// the whole sequence per sample, only for requests that ask for them.

// maxTopLogprobs bounds N, as vLLM's default max_logprobs (20) does.
const maxTopLogprobs = 20

// alt is one alternative: a token and its log-prob.
type alt struct {
	id int32
	lp float32
}

// logitsExec computes the logits [rows, length, vocab] of a padded batch (float32).
type logitsExec struct {
	once sync.Once
	mu   sync.Mutex
	exec *context.Exec
	err  error
}

func (l *logitsExec) get(be backends.Backend, m *runtime.Model) (*context.Exec, error) {
	l.once.Do(func() {
		l.exec, l.err = context.NewExec(be, m.Context(), func(ctx *context.Context, tokens *Node) *Node {
			return ConvertDType(m.Logits(ctx, m.Forward(ctx, tokens)), dtypes.Float32)
		})
	})
	return l.exec, l.err
}

// topLogprobs returns, for the sequence seq = prompt + completion, the n most likely tokens at
// each position t ≥ from that predicts seq[t] (t ≥ 1), best first, under
// log_softmax(logits / temperature(t)).
func (e *engine) topLogprobs(be backends.Backend, seq []int32, from, n int, temperature func(t int) float64) ([][]alt, error) {
	exec, err := e.logits.get(be, e.model)
	if err != nil {
		return nil, fmt.Errorf("top log-probs: %w", err)
	}
	length := runtime.BucketLength(len(seq))
	pad := int32(max(e.model.Config.PAD, 0))
	tokens, _, err := runtime.PadTokens([][]int32{seq}, 1, length, pad)
	if err != nil {
		return nil, fmt.Errorf("top log-probs: %w", err)
	}
	e.logits.mu.Lock()
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, 1, length))
	e.logits.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("top log-probs: %w", err)
	}
	logits, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, fmt.Errorf("top log-probs: %w", err)
	}
	vocab := e.model.Config.VocabSize
	res := make([][]alt, 0, len(seq)-max(from, 1))
	for t := max(from, 1); t < len(seq); t++ {
		res = append(res, topOf(logits[(t-1)*vocab:t*vocab], n, temperature(t)))
	}
	return res, nil
}

// topOf is the n best tokens of log_softmax(logits / temperature), best first (ties: lower id
// first); temperature ≤ 1e-6 (greedy) counts as 1.
func topOf(logits []float32, n int, temperature float64) []alt {
	if temperature <= 1e-6 {
		temperature = 1
	}
	maxL := math.Inf(-1)
	for _, x := range logits {
		maxL = math.Max(maxL, float64(x)/temperature)
	}
	var sum float64
	for _, x := range logits {
		sum += math.Exp(float64(x)/temperature - maxL)
	}
	lse := maxL + math.Log(sum)
	h := &altHeap{}
	for id, x := range logits {
		a := alt{int32(id), float32(float64(x)/temperature - lse)}
		if h.Len() < n {
			heap.Push(h, a)
		} else if worse((*h)[0], a) {
			(*h)[0] = a
			heap.Fix(h, 0)
		}
	}
	out := make([]alt, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(alt)
	}
	return out
}

// worse reports whether a ranks below b.
func worse(a, b alt) bool { return a.lp < b.lp || a.lp == b.lp && a.id > b.id }

// altHeap is a min-heap of alternatives, the worst on top.
type altHeap []alt

func (h altHeap) Len() int           { return len(h) }
func (h altHeap) Less(i, j int) bool { return worse(h[i], h[j]) }
func (h altHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *altHeap) Push(x any)        { *h = append(*h, x.(alt)) }
func (h *altHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
