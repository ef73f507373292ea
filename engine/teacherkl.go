package engine

import (
	"fmt"

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
//
// No full distribution reaches the host: the teacher's log-probs [rows, T, V] (a call of at
// most probeElements, computed a chunk of positions at a time by runtime.Model.HeadRows) stay
// a device tensor that the student's evaluator takes as its input, reducing KL over the
// vocabulary there with its own logits likewise in chunks; only the [rows, T] divergences
// are copied back.
type klProbe struct {
	student, teacher *runtime.Evaluator
	pad              int32
	vocab            int
}

// probeElements bounds the log-probs [rows, T, V] of one probe call per model (32 M float32,
// 128 MiB): a real vocabulary (151,936) makes 64 sequences of 256 tokens 10 GB.
const probeElements = 32 << 20

// Inputs and outputs of the probe's evaluators.
const (
	bTokensKey     = "tokens"       // right-padded token ids [R, T]
	bTeacherLogp   = "teacher_logp" // the teacher's log-probs [R, T, V], the student's input
	outLogp        = "logp"         // the teacher's output
	outPositionKLs = "kl"           // the student's output: KL(student ‖ teacher) [R, T]
)

// teacherLogpFn is the teacher's log-softmax at every position, a chunk of positions at a time.
func teacherLogpFn(ctx *context.Context, m *runtime.Model, batch map[string]*graph.Node) map[string]*graph.Node {
	h := m.Forward(ctx, batch[bTokensKey])
	return map[string]*graph.Node{outLogp: m.HeadRows(ctx, h, nil, func(z *graph.Node, _ []*graph.Node) *graph.Node {
		return runtime.LogSoftmaxLast(z)
	})}
}

// studentKLFn is Σ_v exp(ls_v)·(ls_v − lt_v) at every position, with ls the student's
// log-softmax and lt the teacher's log-probs given as input; the sum over the vocabulary runs
// on the device, a chunk of positions at a time.
func studentKLFn(ctx *context.Context, m *runtime.Model, batch map[string]*graph.Node) map[string]*graph.Node {
	h := m.Forward(ctx, batch[bTokensKey])
	kl := m.HeadRows(ctx, h, []*graph.Node{batch[bTeacherLogp]}, func(z *graph.Node, rows []*graph.Node) *graph.Node {
		ls := runtime.LogSoftmaxLast(z)
		lt := graph.ConvertDType(rows[0], ls.DType())
		return graph.ReduceAndKeep(graph.Mul(graph.Exp(ls), graph.Sub(ls, lt)), graph.ReduceSum, -1)
	})
	return map[string]*graph.Node{outPositionKLs: graph.Squeeze(kl, -1)}
}

func newKLProbe(b *runtime.Backend, student, teacher *runtime.Model) (*klProbe, error) {
	if student.Config.VocabSize != teacher.Config.VocabSize {
		return nil, fmt.Errorf("teacher KL: the student's vocabulary (%d) and the teacher's (%d) differ",
			student.Config.VocabSize, teacher.Config.VocabSize)
	}
	s, err := runtime.NewEvaluator(b, student, studentKLFn)
	if err != nil {
		return nil, fmt.Errorf("teacher KL: %w", err)
	}
	t, err := runtime.NewEvaluator(b, teacher, teacherLogpFn)
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
		tokens := tensors.FromFlatDataAndDimensions(tok, R, T)
		lt, err := p.teacher.Run(map[string]*tensors.Tensor{bTokensKey: tokens})
		if err != nil {
			return 0, fmt.Errorf("teacher KL: teacher: %w", err)
		}
		out, err := p.student.Run(map[string]*tensors.Tensor{bTokensKey: tokens, bTeacherLogp: lt[outLogp]})
		// The teacher's chunk of distributions is freed now rather than when collected.
		if ferr := lt[outLogp].FinalizeAll(); ferr != nil && err == nil {
			err = ferr
		}
		if err != nil {
			return 0, fmt.Errorf("teacher KL: student: %w", err)
		}
		kls, err := tensors.CopyFlatData[float32](out[outPositionKLs])
		if err != nil {
			return 0, fmt.Errorf("teacher KL: %w", err)
		}
		for r := range seqs {
			i := lo + r
			// Position t predicts token t+1: the completion's tokens are predicted from
			// positions len(prompt)-1 … len(seq)-2.
			for t := len(prompts[i]) - 1; t < len(seqs[r])-1; t++ {
				sum += float64(kls[r*T+t])
				n++
			}
		}
	}
	if n == 0 {
		return 0, nil
	}
	return sum / float64(n), nil
}
