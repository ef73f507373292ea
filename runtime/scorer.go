package runtime

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Scorer computes per-token log-probs (and entropies) of given token sequences with a model,
// forward only, with graphs cached per (batch, length) bucket.
type Scorer struct {
	m  *Model
	mu sync.Mutex
	// lp computes log-probs only; lpEnt adds entropies (an extra pass over the logits).
	lp, lpEnt *context.Exec
}

// NewScorer prepares forward-only scoring of m on backend.
func NewScorer(backend backends.Backend, m *Model) (*Scorer, error) {
	if err := moveToBackend(backend, m.Context()); err != nil { // no host copy left behind (upload.go)
		return nil, fmt.Errorf("scorer: %w", err)
	}
	lp, err := context.NewExec(backend, m.Context(), func(ctx *context.Context, tokens, targets *Node) *Node {
		h := m.Forward(ctx, tokens)
		lp, _ := chunkedLogProbsAndEntropy(m.computeDType(), h, m.headWeight(ctx, h.Graph()), targets, m.headChunkRows())
		return lp
	})
	if err != nil {
		return nil, fmt.Errorf("scorer: %w", err)
	}
	lpEnt, err := context.NewExec(backend, m.Context(), func(ctx *context.Context, tokens, targets *Node) (*Node, *Node) {
		h := m.Forward(ctx, tokens)
		return chunkedLogProbsAndEntropy(m.computeDType(), h, m.headWeight(ctx, h.Graph()), targets, m.headChunkRows())
	})
	if err != nil {
		return nil, fmt.Errorf("scorer: %w", err)
	}
	anyShapes(lp)
	anyShapes(lpEnt)
	return &Scorer{m: m, lp: lp, lpEnt: lpEnt}, nil
}

// Scored is the result of scoring one sequence of n tokens: LogProbs[t] = log p(tokens[t+1] |
// tokens[≤t]) and Entropy[t] the entropy of that next-token distribution, for t < n−1
// (Entropy only from ScoreWithEntropy).
type Scored struct {
	LogProbs []float32
	Entropy  []float32
}

// Score returns per-token log-probs of each sequence (each at least one token long).
func (s *Scorer) Score(seqs [][]int32) ([]Scored, error) { return s.score(seqs, false) }

// ScoreWithEntropy is Score plus the entropy of every next-token distribution.
func (s *Scorer) ScoreWithEntropy(seqs [][]int32) ([]Scored, error) { return s.score(seqs, true) }

func (s *Scorer) score(seqs [][]int32, withEntropy bool) ([]Scored, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	maxLen := 0
	for i, q := range seqs {
		if len(q) == 0 {
			return nil, fmt.Errorf("score: sequence %d is empty", i)
		}
		maxLen = max(maxLen, len(q))
	}
	if mp := s.m.Config.MaxPositions; mp > 0 && maxLen > mp {
		return nil, fmt.Errorf("score: sequence of %d tokens exceeds the model's %d positions", maxLen, mp)
	}
	for i, q := range seqs {
		for _, tok := range q {
			if tok < 0 || int(tok) >= s.m.Config.VocabSize {
				return nil, fmt.Errorf("score: sequence %d has token %d outside the vocabulary [0, %d)", i, tok, s.m.Config.VocabSize)
			}
		}
	}
	rows, length := BucketBatch(len(seqs)), BucketLength(maxLen)
	pad := int32(max(s.m.Config.PAD, 0))
	tokens, mask, err := PadTokens(seqs, rows, length, pad)
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	targets, _ := ShiftTargets(tokens, mask, rows, length, pad)
	exec := s.lp
	if withEntropy {
		exec = s.lpEnt
	}
	s.mu.Lock()
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length),
		tensors.FromFlatDataAndDimensions(targets, rows, length))
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	lp, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	var ent []float32
	if withEntropy {
		if ent, err = tensors.CopyFlatData[float32](out[1]); err != nil {
			return nil, fmt.Errorf("score: %w", err)
		}
	}
	res := make([]Scored, len(seqs))
	for r, q := range seqs {
		n := len(q) - 1
		res[r].LogProbs = append([]float32(nil), lp[r*length:r*length+n]...)
		if withEntropy {
			res[r].Entropy = append([]float32(nil), ent[r*length:r*length+n]...)
		}
	}
	return res, nil
}
