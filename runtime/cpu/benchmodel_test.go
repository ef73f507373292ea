package cpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/cpu"
)

// meanNLL is a plain language-model loss: the masked mean negative log-likelihood.
func meanNLL(ctx *context.Context, m *runtime.Model, batch map[string]*graph.Node) (*graph.Node, map[string]*graph.Node) {
	lp := m.TokenLogProbs(ctx, batch["tokens"], batch["targets"])
	mask := batch["mask"]
	loss := graph.Neg(graph.Div(graph.ReduceAllSum(graph.Mul(lp, mask)), graph.ReduceAllSum(mask)))
	return loss, nil
}

// benchModelResult is what runBenchModel computes.
type benchModelResult struct {
	logProbs []float32
	loss     float64
	names    []string
	grads    [][]float32
}

// runBenchModel runs the "bench" model (stx bench's yardstick: Llama-style, 4.3 M parameters)
// on b from fixed weights and tokens: the scorer's log-probs, and the masked NLL's loss and
// gradients of every variable, built as the trainer builds them.
func runBenchModel(t *testing.T, b *runtime.Backend) benchModelResult {
	t.Helper()
	cfg, ok := runtime.BuiltinConfig("bench")
	if !ok {
		t.Fatal("no built-in bench config")
	}
	const rows, length = 2, 64
	rng := rand.New(rand.NewPCG(51, 52))
	seqs := make([][]int32, rows)
	for i := range seqs {
		seqs[i] = make([]int32, length)
		for j := range seqs[i] {
			seqs[i][j] = int32(rng.IntN(cfg.VocabSize))
		}
	}
	pad := int32(max(cfg.PAD, 0))
	tokens, mask, err := runtime.PadTokens(seqs, rows, length, pad)
	if err != nil {
		t.Fatal(err)
	}
	targets, tmask := runtime.ShiftTargets(tokens, mask, rows, length, pad)

	spec := b.Spec
	m, err := runtime.NewModel(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := runtime.NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	scored, err := sc.Score(seqs)
	if err != nil {
		t.Fatalf("%s: score: %v", spec, err)
	}
	var res benchModelResult
	for _, s := range scored {
		res.logProbs = append(res.logProbs, s.LogProbs...)
	}
	// Gradients of every variable, built like the trainer builds them.
	var vars []*context.Variable
	m.Context().EnumerateVariables(func(v *context.Variable) { vars = append(vars, v) })
	exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, tok, tgt, msk *graph.Node) []*graph.Node {
		loss, _ := meanNLL(ctx, m, map[string]*graph.Node{"tokens": tok, "targets": tgt, "mask": msk})
		params := make([]*graph.Node, len(vars))
		for i, v := range vars {
			params[i] = v.ValueGraph(loss.Graph())
		}
		return append([]*graph.Node{loss}, graph.Gradient(loss, params...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length),
		tensors.FromFlatDataAndDimensions(targets, rows, length), tensors.FromFlatDataAndDimensions(tmask, rows, length))
	if err != nil {
		t.Fatalf("%s: gradients: %v", spec, err)
	}
	res.loss = float64(tensors.ToScalar[float32](outs[0]))
	for i, o := range outs[1:] {
		res.names = append(res.names, vars[i].ScopeAndName())
		res.grads = append(res.grads, tensors.MustCopyFlatData[float32](o))
	}
	return res
}

// gradientsClose requires each variable's gradient in got to match want's as a whole,
// ‖g − g_want‖ ≤ 1e-5·‖g_want‖ (elementwise relative error is meaningless for the entries that
// cancel to nearly zero), and returns the worst relative difference.
func gradientsClose(t *testing.T, got, want benchModelResult) float64 {
	t.Helper()
	worst := 0.0
	for i, name := range want.names {
		var diff, norm float64
		for j, w := range want.grads[i] {
			d := float64(got.grads[i][j]) - float64(w)
			diff += d * d
			norm += float64(w) * float64(w)
		}
		rel := math.Sqrt(diff / norm)
		worst = max(worst, rel)
		if !(rel <= 1e-5) {
			t.Errorf("gradient of %s: relative difference %.2g", name, rel)
		}
	}
	return worst
}

// TestBenchModelMatchesSimpleGo runs the bench model on both backends and requires equal
// log-probs, loss and gradients of every variable, to 1e-5 relative.
func TestBenchModelMatchesSimpleGo(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs the bench model on SimpleGo (seconds; minutes under -race)")
	}
	runOn := func(spec string) benchModelResult {
		b, err := runtime.NewBackend(spec)
		if err != nil {
			t.Fatal(err)
		}
		return runBenchModel(t, b)
	}
	got, want := runOn("cpu"), runOn("go")
	close := func(g, w float64) bool { return math.Abs(g-w) <= 1e-5*math.Abs(w) }
	if len(got.logProbs) != len(want.logProbs) {
		t.Fatalf("%d log-probs, want %d", len(got.logProbs), len(want.logProbs))
	}
	for i := range got.logProbs {
		if !close(float64(got.logProbs[i]), float64(want.logProbs[i])) {
			t.Fatalf("log-prob %d: cpu %v, SimpleGo %v", i, got.logProbs[i], want.logProbs[i])
		}
	}
	if !close(got.loss, want.loss) {
		t.Errorf("loss %v, SimpleGo %v", got.loss, want.loss)
	}
	worst := gradientsClose(t, got, want)
	t.Logf("%d gradients, worst relative difference %.2g; loss %.7f (SimpleGo %.7f)", len(want.names), worst, got.loss, want.loss)
}

// TestBenchModelFusionSameBits runs the bench model's forward and backward pass with and
// without broadcast fusion (fuse.go) and requires the same bits everywhere: fusion changes
// how elementwise ops index their operands, never what they compute.
func TestBenchModelFusionSameBits(t *testing.T) {
	if raceEnabled {
		t.Skip("seconds; minutes under -race")
	}
	fused, err := runtime.NewBackend("cpu")
	if err != nil {
		t.Fatal(err)
	}
	got := runBenchModel(t, fused)
	want := runBenchModel(t, &runtime.Backend{Backend: cpu.NewUnfusedForTest(), Spec: "cpu"})
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	for i := range want.logProbs {
		if !same(got.logProbs[i], want.logProbs[i]) {
			t.Fatalf("log-prob %d: fused %v, unfused %v", i, got.logProbs[i], want.logProbs[i])
		}
	}
	if got.loss != want.loss {
		t.Errorf("loss: fused %v, unfused %v", got.loss, want.loss)
	}
	for i, name := range want.names {
		for j, w := range want.grads[i] {
			if !same(got.grads[i][j], w) {
				t.Fatalf("gradient of %s, element %d: fused %v, unfused %v", name, j, got.grads[i][j], w)
			}
		}
	}
}

// TestBenchModelPairing runs the bench model's forward and backward pass with and without
// independent products run side by side (pair.go) and requires the same results within
// float32 rounding: a paired product runs on one thread, which with some OpenBLAS kernels
// rounds a few elements differently from the same product on OpenBLAS's pool.
func TestBenchModelPairing(t *testing.T) {
	if raceEnabled {
		t.Skip("seconds; minutes under -race")
	}
	got := runBenchModel(t, &runtime.Backend{Backend: cpu.NewPairedForTest(), Spec: "cpu"})
	want := runBenchModel(t, &runtime.Backend{Backend: cpu.NewUnpairedForTest(), Spec: "cpu"})
	for i := range want.logProbs {
		if g, w := float64(got.logProbs[i]), float64(want.logProbs[i]); !(math.Abs(g-w) <= 1e-5*math.Abs(w)) {
			t.Fatalf("log-prob %d: paired %v, unpaired %v", i, g, w)
		}
	}
	if !(math.Abs(got.loss-want.loss) <= 1e-6*math.Abs(want.loss)) {
		t.Errorf("loss: paired %v, unpaired %v", got.loss, want.loss)
	}
	t.Logf("worst relative difference of a gradient %.2g", gradientsClose(t, got, want))
}
