package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
)

// TestKLProbeMatchesFloat64: the probe's mean KL(student ‖ teacher) over the completion
// tokens, reduced over the vocabulary on the device with the heads in chunks of 3 positions,
// equals a float64 evaluation of the definition on both models' full logits.
func TestKLProbeMatchesFloat64(t *testing.T) {
	be, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	student, err := runtime.OpenModel("tiny", 7)
	if err != nil {
		t.Fatal(err)
	}
	teacher, err := runtime.OpenModel("tiny", 99)
	if err != nil {
		t.Fatal(err)
	}
	student.HeadChunkRows, teacher.HeadChunkRows = 3, 3
	probe, err := newKLProbe(be, student, teacher)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var prompts, comps [][]int32
	for range 3 {
		p, c := make([]int32, 2+rng.IntN(3)), make([]int32, 1+rng.IntN(5))
		for i := range p {
			p[i] = int32(97 + rng.IntN(20))
		}
		for i := range c {
			c[i] = int32(97 + rng.IntN(20))
		}
		prompts, comps = append(prompts, p), append(comps, c)
	}
	got, err := probe.measure(prompts, comps)
	if err != nil {
		t.Fatal(err)
	}

	// The reference: each sequence alone, unpadded, full logits of both models.
	logitsOf := func(m *runtime.Model, seq []int32) []float32 {
		e, err := runtime.NewEvaluator(be, m, func(ctx *context.Context, m *runtime.Model, b map[string]*graph.Node) map[string]*graph.Node {
			return map[string]*graph.Node{"z": m.Logits(ctx, m.Forward(ctx, b["tokens"]))}
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.Run(map[string]*tensors.Tensor{"tokens": tensors.FromFlatDataAndDimensions(seq, 1, len(seq))})
		if err != nil {
			t.Fatal(err)
		}
		return tensors.MustCopyFlatData[float32](out["z"])
	}
	logSoftmax := func(z []float32) []float64 {
		mx := math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, float64(v))
		}
		s := 0.0
		for _, v := range z {
			s += math.Exp(float64(v) - mx)
		}
		out := make([]float64, len(z))
		for i, v := range z {
			out[i] = float64(v) - mx - math.Log(s)
		}
		return out
	}
	V := student.Config.VocabSize
	sum, n := 0.0, 0
	for i := range prompts {
		seq := append(append([]int32{}, prompts[i]...), comps[i]...)
		zs, zt := logitsOf(student, seq), logitsOf(teacher, seq)
		for pos := len(prompts[i]) - 1; pos < len(seq)-1; pos++ {
			ls, lt := logSoftmax(zs[pos*V:(pos+1)*V]), logSoftmax(zt[pos*V:(pos+1)*V])
			kl := 0.0
			for v := range V {
				kl += math.Exp(ls[v]) * (ls[v] - lt[v])
			}
			sum += kl
			n++
		}
	}
	want := sum / float64(n)
	if want <= 0 || math.Abs(got-want) > 1e-4*want+1e-7 {
		t.Fatalf("probe KL %.9g, float64 reference %.9g", got, want)
	}
	t.Logf("probe KL %.9g, float64 reference %.9g over %d tokens", got, want, n)
}
