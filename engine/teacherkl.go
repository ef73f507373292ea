package engine

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
)

// klProbe measures how far a distilled student is from its teacher, the objective every
// distillation recipe shares (OPD, GKD, DAgger, AggreVaTe and their blend each report a
// loss of their own, on data of their own): the reverse KL(student ‖ teacher) of the full
// next-token distributions at every completion token of the student's validation samples,
// averaged over those tokens. The distributions are the models' own (temperature 1).
type klProbe struct {
	student, teacher *runtime.Evaluator
	pad              int32
	vocab            int
}

// probeElements bounds the log-probs [rows, T, V] of one probe call per model (32 M float32,
// 128 MiB): a real vocabulary (151,936) makes 64 sequences of 256 tokens 10 GB.
const probeElements = 32 << 20

func logSoftmaxFn(ctx *context.Context, m *runtime.Model, batch map[string]*graph.Node) map[string]*graph.Node {
	return map[string]*graph.Node{"logp": runtime.LogSoftmaxLast(m.Logits(ctx, m.Forward(ctx, batch[bTokensKey])))}
}

// bTokensKey is the probe's one input: right-padded token ids [R, T].
const bTokensKey = "tokens"

func newKLProbe(b *runtime.Backend, student, teacher *runtime.Model) (*klProbe, error) {
	if student.Config.VocabSize != teacher.Config.VocabSize {
		return nil, fmt.Errorf("teacher KL: the student's vocabulary (%d) and the teacher's (%d) differ",
			student.Config.VocabSize, teacher.Config.VocabSize)
	}
	s, err := runtime.NewEvaluator(b, student, logSoftmaxFn)
	if err != nil {
		return nil, fmt.Errorf("teacher KL: %w", err)
	}
	t, err := runtime.NewEvaluator(b, teacher, logSoftmaxFn)
	if err != nil {
		return nil, fmt.Errorf("teacher KL: %w", err)
	}
	return &klProbe{student: s, teacher: t, pad: int32(max(student.Config.PAD, 0)), vocab: student.Config.VocabSize}, nil
}

// measure returns the mean KL(student ‖ teacher) over the completion tokens of
// prompts[i] + completions[i] (the distributions that predicted each completion token).
func (p *klProbe) measure(prompts, completions [][]int32) (float64, error) {
	longest := 0
	for i := range prompts {
		longest = max(longest, len(prompts[i])+len(completions[i]))
	}
	// Up to 64 sequences per call, fewer (a power of two, so the batch bucket is no larger)
	// where their full distributions would exceed probeElements.
	chunk := 64
	for chunk > 1 && chunk*runtime.BucketLength(longest)*p.vocab > probeElements {
		chunk /= 2
	}
	sum, n := 0.0, 0
	for lo := 0; lo < len(prompts); lo += chunk {
		hi := min(lo+chunk, len(prompts))
		var seqs [][]int32
		longest := 0
		for i := lo; i < hi; i++ {
			s := append(append([]int32{}, prompts[i]...), completions[i]...)
			seqs = append(seqs, s)
			longest = max(longest, len(s))
		}
		R, T := runtime.BucketBatch(len(seqs)), runtime.BucketLength(longest)
		tok, _, err := runtime.PadTokens(seqs, R, T, p.pad)
		if err != nil {
			return 0, err
		}
		in := map[string]*tensors.Tensor{bTokensKey: tensors.FromFlatDataAndDimensions(tok, R, T)}
		ls, err := p.logp(p.student, in)
		if err != nil {
			return 0, err
		}
		lt, err := p.logp(p.teacher, in)
		if err != nil {
			return 0, err
		}
		V := len(ls) / (R * T)
		for r := range seqs {
			i := lo + r
			// Position t predicts token t+1: the completion's tokens are predicted from
			// positions len(prompt)-1 … len(seq)-2.
			for t := len(prompts[i]) - 1; t < len(seqs[r])-1; t++ {
				base := (r*T + t) * V
				kl := 0.0
				for v := range V {
					a, b := float64(ls[base+v]), float64(lt[base+v])
					kl += math.Exp(a) * (a - b)
				}
				sum += kl
				n++
			}
		}
	}
	if n == 0 {
		return 0, nil
	}
	return sum / float64(n), nil
}

func (p *klProbe) logp(e *runtime.Evaluator, in map[string]*tensors.Tensor) ([]float32, error) {
	out, err := e.Run(in)
	if err != nil {
		return nil, fmt.Errorf("teacher KL: %w", err)
	}
	flat, err := tensors.CopyFlatData[float32](out["logp"])
	if err != nil {
		return nil, fmt.Errorf("teacher KL: %w", err)
	}
	return flat, nil
}
