package runtime

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestLoRADropoutUniform: the mask hash's values are uniform in [0, 1), and independent across
// projections (salts) and counters.
func TestLoRADropoutUniform(t *testing.T) {
	b := testBackend(t)
	const n = 1 << 15
	exec, err := NewExec(b, func(c *Node) []*Node {
		s := shapes.Make(dtypes.Float32, 64, n/64)
		return []*Node{dropoutUniform(c, 5, 3, s), dropoutUniform(c, 5, 4, s), dropoutUniform(AddScalar(c, 1), 5, 3, s)}
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Exec(tensors.FromScalar(int64(7) << 20))
	if err != nil {
		t.Fatal(err)
	}
	u := make([][]float32, 3)
	for i := range u {
		u[i] = tensors.MustCopyFlatData[float32](out[i])
	}
	var hist [10]int
	mean := 0.0
	for _, v := range u[0] {
		if !(v >= 0 && v < 1) {
			t.Fatalf("value %v outside [0, 1)", v)
		}
		hist[int(v*10)]++
		mean += float64(v)
	}
	mean /= n
	if math.Abs(mean-0.5) > 0.01 {
		t.Errorf("mean %v, want 0.5", mean)
	}
	for i, c := range hist { // each decile holds n/10 ± 5σ
		if math.Abs(float64(c)-n/10) > 5*math.Sqrt(n*0.09) {
			t.Errorf("decile %d holds %d of %d values", i, c, n)
		}
	}
	// Neighbouring elements, other salts and the next counter are uncorrelated.
	corr := func(a, b []float32) float64 {
		s := 0.0
		for i := range a {
			s += (float64(a[i]) - 0.5) * (float64(b[i]) - 0.5)
		}
		return s / float64(len(a)) * 12 // variance of U(0,1) is 1/12
	}
	for name, c := range map[string]float64{
		"neighbours": corr(u[0][1:], u[0][:n-1]), "salts": corr(u[0], u[1]), "counters": corr(u[0], u[2]),
	} {
		if math.Abs(c) > 5/math.Sqrt(n) {
			t.Errorf("correlation between %s: %v", name, c)
		}
	}
}

// TestLoRADropoutExpectation: a dropping projection's expectation over masks is the projection
// without dropout (the kept inputs are scaled by 1/(1−p)); the base path is never dropped.
func TestLoRADropoutExpectation(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	const p = 0.3
	m := loraModel(t, cfg, LoRAConfig{Rank: 4, Alpha: 8, Dropout: p, Targets: []string{"up_proj"}})
	module := "model.layers.1.mlp.up_proj"
	drop := trainingView(m)
	rng := rand.New(rand.NewPCG(2, 2))
	const rows = 6
	x := make([]float32, rows*cfg.Hidden)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	build := func(mm *Model, ctx *context.Context, x *Node) *Node {
		w := func(name string) *Node { return mm.weight(ctx, x.Graph(), name) }
		return Sub(mm.project(x, w, module), mm.linear(x, w(module+".weight"))) // the adapter's part
	}
	exact, err := context.NewExec(b, m.Context(), func(ctx *context.Context, x *Node) *Node { return build(m, ctx, x) })
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := context.NewExec(b, m.Context(), func(ctx *context.Context, x, c *Node) *Node {
		d := *drop
		d.dropDraw = c
		return build(&d, ctx, x)
	})
	if err != nil {
		t.Fatal(err)
	}
	xt := tensors.FromFlatDataAndDimensions(x, rows, cfg.Hidden)
	want := tensors.MustCopyFlatData[float32](exact.MustExec1(xt))
	const draws = 400
	sum := make([]float64, len(want))
	sumSq := make([]float64, len(want))
	var zeroDraws int
	for k := range draws {
		got := tensors.MustCopyFlatData[float32](dropped.MustExec1(xt, tensors.FromScalar(int64(k))))
		same := true
		for i, v := range got {
			sum[i] += float64(v)
			sumSq[i] += float64(v) * float64(v)
			same = same && v == want[i]
		}
		if same {
			zeroDraws++
		}
	}
	if zeroDraws > 0 {
		t.Fatalf("%d of %d draws left the adapter's input whole", zeroDraws, draws)
	}
	worst := 0.0
	for i := range want {
		mean := sum[i] / draws
		sd := math.Sqrt(math.Max(sumSq[i]/draws-mean*mean, 0))
		z := math.Abs(mean-float64(want[i])) / (sd/math.Sqrt(draws) + 1e-9)
		worst = math.Max(worst, z)
	}
	// len(want) = rows·intermediate values, each within 5 standard errors of the expectation.
	if worst > 5 {
		t.Errorf("mean over %d draws is %.1f standard errors from the projection without dropout", draws, worst)
	}
	t.Logf("worst deviation of the mean: %.2f standard errors over %d values", worst, len(want))
}

// TestLoRADropoutTraining: dropout drops in training only, deterministically: the same run
// twice gives the same adapters bit for bit, a run resumed from a checkpoint takes the steps
// the uninterrupted one took, the loss differs from the run without dropout, while scoring
// the model does not drop. Dropout 0 builds the trainer's graphs on the model itself.
func TestLoRADropoutTraining(t *testing.T) {
	b := testBackend(t)
	cfg, _ := BuiltinConfig("tiny")
	batch := sftBatch(rand.New(rand.NewPCG(3, 3)), cfg, 4, 24)
	tc := TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{Kind: "constant", BaseLR: 1e-2}}
	open := func(dropout float64) (*Model, *Trainer) {
		m, err := NewModel(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 16, Dropout: dropout, Targets: []string{LoRAAllLinear}}, 1); err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(b, m, sftLoss, tc)
		if err != nil {
			t.Fatal(err)
		}
		return m, tr
	}
	steps := func(tr *Trainer, n int) []float64 {
		var losses []float64
		for range n {
			res, err := tr.Step(batch1(batch))
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, res.Loss)
		}
		return losses
	}
	m0, tr0 := open(0)
	if trainingView(m0) != m0 {
		t.Error("dropout 0: the trainer does not build on the model itself")
	}
	l0 := steps(tr0, 3)
	m1, tr1 := open(0.3)
	l1 := steps(tr1, 2)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tr1.SaveCheckpoint(dir, nil); err != nil {
		t.Fatal(err)
	}
	l1 = append(l1, steps(tr1, 1)...)
	m2, tr2 := open(0.3)
	l2 := steps(tr2, 3)
	for i := range l1 {
		if l1[i] != l2[i] {
			t.Errorf("step %d: loss %v, then %v in the same run again", i, l1[i], l2[i])
		}
	}
	// Step 0 starts from the same weights (B = 0): the adapters' output is zero and dropout
	// cannot show; later steps differ.
	if l1[1] == l0[1] || l1[2] == l0[2] {
		t.Errorf("losses with dropout %v, without %v: dropout does not act in training", l1, l0)
	}
	for _, p := range m1.AdapterParams() {
		a, _ := m1.ParamValues(p.Name)
		c, _ := m2.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s differs between two identical runs with dropout", p.Name)
		}
	}
	m3, tr3 := open(0.3)
	if _, err := tr3.LoadCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	if l3 := steps(tr3, 1); l3[0] != l1[2] {
		t.Errorf("resumed step: loss %v, uninterrupted %v", l3[0], l1[2])
	}
	for _, p := range m1.AdapterParams() {
		a, _ := m1.ParamValues(p.Name)
		c, _ := m3.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s differs between the run and its resumption", p.Name)
		}
	}
	// Scoring drops nothing: the trained model scores as a dropout-free copy of it does.
	plain, _ := open(0)
	for _, p := range m1.AdapterParams() {
		v, _ := m1.ParamValues(p.Name)
		if err := plain.SetAdapter(p.Name, v); err != nil {
			t.Fatal(err)
		}
	}
	seqs := randomSeqs(rand.New(rand.NewPCG(4, 4)), cfg.VocabSize, 9, 11)
	score := func(m *Model) []float32 {
		sc, err := NewScorer(b, m)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sc.Score(seqs)
		if err != nil {
			t.Fatal(err)
		}
		var out []float32
		for _, r := range res {
			out = append(out, r.LogProbs...)
		}
		return out
	}
	if !sameBits(score(m1), score(plain)) {
		t.Error("scoring a model with adapter dropout drops")
	}
}
