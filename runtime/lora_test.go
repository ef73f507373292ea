package runtime

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/safetensors"
)

// loraModel is a small GQA model with adapters on every projection, B set to random values
// (a fresh adapter's B is zero and would hide mistakes in the B path).
func loraModel(t testing.TB, cfg Config, lc LoRAConfig) *Model {
	t.Helper()
	m, err := NewModel(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddLoRA(lc, 6); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range m.AdapterParams() {
		if strings.HasSuffix(p.Name, "lora_B.weight") {
			v := make([]float32, shapeSize(p.Shape))
			for i := range v {
				v[i] = float32(0.05 * rng.NormFloat64())
			}
			if err := m.SetAdapter(p.Name, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return m
}

// mergeRef returns a float64 reference of m with every adapted projection replaced by
// W + s·B·A computed in float64 from the adapters in adapters (name → values).
func mergeRef(t testing.TB, m *Model, adapters map[string][]float64) *refModel {
	t.Helper()
	ref, err := newRefModel(m)
	if err != nil {
		t.Fatal(err)
	}
	lc := m.LoRA()
	s := lc.Scale()
	r := lc.Rank
	for l := range m.Config.Layers {
		for _, kind := range lc.Modules() {
			mod := moduleOf(l, kind)
			a, b := adapters[mod+".lora_A.weight"], adapters[mod+".lora_B.weight"]
			out, in := m.Config.projectionShape(kind)
			w := ref.w[mod+".weight"]
			for o := range out {
				for i := range in {
					acc := 0.0
					for k := range r {
						acc += b[o*r+k] * a[k*in+i]
					}
					w[o*in+i] += s * acc
				}
			}
		}
	}
	return ref
}

func adapterValues(t testing.TB, m *Model) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, p := range m.AdapterParams() {
		v, err := m.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		out[p.Name] = f
	}
	return out
}

// TestLoRALogProbsMatchFloat64Reference: with adapters on, the model's log-probs are those of
// the float64 model whose projections are W + s·B·A; with adapters off (WithoutAdapters, the
// reference of a LoRA role) those of the base model, from the same variables.
func TestLoRALogProbsMatchFloat64Reference(t *testing.T) {
	b := testBackend(t)
	for _, lc := range []LoRAConfig{
		{Rank: 4, Alpha: 8, Targets: []string{LoRAAllLinear}},
		{Rank: 2, Alpha: 3, Targets: []string{"q_proj", "v_proj", "down_proj"}, Init: LoRAInitGaussian, RSLoRA: true},
	} {
		m := loraModel(t, smallGQA(), lc)
		seqs := randomSeqs(rand.New(rand.NewPCG(1, 2)), m.Config.VocabSize, 7, 12)
		worst := checkScorerAgainstReference(t, b, m, mergeRef(t, m, adapterValues(t, m)), seqs)
		base, err := newRefModel(m)
		if err != nil {
			t.Fatal(err)
		}
		worstOff := checkScorerAgainstReference(t, b, m.WithoutAdapters(), base, seqs)
		t.Logf("%v: worst |Δ log-prob| %.2g with adapters, %.2g without", lc.Targets, worst, worstOff)
	}
}

// TestLoRAGradientsMatchFiniteDifferences checks the gradients of the adapters (and that the
// base weights get none from a trainer) against central differences of the float64 merged
// reference.
func TestLoRAGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := smallGQA()
	cfg.Layers = 1
	m := loraModel(t, cfg, LoRAConfig{Rank: 3, Alpha: 6, Targets: []string{LoRAAllLinear}})
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, length = 2, 8
	seqs := randomSeqs(rng, cfg.VocabSize, length, 6)
	tokens, mask, _ := PadTokens(seqs, rows, length, 0)
	targets, tmask := ShiftTargets(tokens, mask, rows, length, 0)
	w1 := make([]float32, rows*length)
	for i := range w1 {
		w1[i] = tmask[i] * float32(rng.NormFloat64())
	}
	ps := m.AdapterParams()
	exec, err := context.NewExec(testBackend(t), m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		lp := LogProbs(m.Logits(ctx, m.Forward(ctx, in[0])), in[1])
		loss := ReduceAllSum(Mul(lp, in[2]))
		params := make([]*Node, len(ps))
		for i, p := range ps {
			params[i] = m.Variable(p.Name).ValueGraph(loss.Graph())
		}
		return Gradient(loss, params...)
	})
	if err != nil {
		t.Fatal(err)
	}
	grads, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length),
		tensors.FromFlatDataAndDimensions(targets, rows, length), tensors.FromFlatDataAndDimensions(w1, rows, length))
	if err != nil {
		t.Fatal(err)
	}
	ad := adapterValues(t, m)
	refLoss := func() float64 {
		ref := mergeRef(t, m, ad)
		total := 0.0
		for r, s := range seqs {
			lp, _ := ref.logProbs(s)
			for j, v := range lp {
				total += float64(w1[r*length+j]) * v
			}
		}
		return total
	}
	const h = 1e-5
	checked := 0
	for i, p := range ps {
		g := tensors.MustCopyFlatData[float32](grads[i])
		w := ad[p.Name]
		for range 3 {
			k := rng.IntN(len(w))
			orig := w[k]
			w[k] = orig + h
			up := refLoss()
			w[k] = orig - h
			down := refLoss()
			w[k] = orig
			fd := (up - down) / (2 * h)
			if math.Abs(float64(g[k])-fd) > 2e-4+2e-3*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %v, finite difference %v", p.Name, k, g[k], fd)
			}
			checked++
		}
	}
	t.Logf("checked %d gradient entries across %d adapter tensors", checked, len(ps))
}

// TestLoRATrainsAdaptersAndResumesExactly: a trainer of a LoRA model updates only the adapters
// and holds optimizer state for them alone; its checkpoint is a PEFT adapter directory plus
// the optimizer state, and a run resumed from it takes the same next step, bit for bit.
func TestLoRATrainsAdaptersAndResumesExactly(t *testing.T) {
	b := testBackend(t)
	cfg, _ := BuiltinConfig("tiny")
	lc := LoRAConfig{Rank: 4, Alpha: 16, Targets: []string{"q_proj", "v_proj", "up_proj"}}
	batch := sftBatch(rand.New(rand.NewPCG(3, 3)), cfg, 4, 24)
	tc := TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{Kind: "constant", BaseLR: 1e-2}}
	open := func(loraSeed uint64) (*Model, *Trainer) {
		m, err := NewModel(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddLoRA(lc, loraSeed); err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(b, m, sftLoss, tc)
		if err != nil {
			t.Fatal(err)
		}
		return m, tr
	}
	m, tr := open(1)
	if len(tr.trainVar) != len(m.AdapterParams()) {
		t.Fatalf("trainer holds %d variables, want the %d adapters", len(tr.trainVar), len(m.AdapterParams()))
	}
	baseBefore, _ := m.ParamValues("model.layers.0.self_attn.q_proj.weight")
	var first, last StepResult
	for i := range 6 {
		res, err := tr.Step(batch1(batch))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res
		}
		last = res
	}
	if last.Loss >= first.Loss {
		t.Errorf("loss %v → %v: the adapters do not learn", first.Loss, last.Loss)
	}
	baseAfter, _ := m.ParamValues("model.layers.0.self_attn.q_proj.weight")
	if !sameBits(baseBefore, baseAfter) {
		t.Error("a train step changed a frozen base weight")
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tr.SaveCheckpoint(dir, []byte("rng")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		t.Error("a LoRA checkpoint holds a full model")
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	key := "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
	if ts, ok := f.Tensors[key]; !ok || ts.Shape[0] != 4 || ts.Shape[1] != cfg.Hidden {
		t.Errorf("adapter file lacks %s [4, %d]: %v", key, cfg.Hidden, ts.Shape)
	}
	if len(f.Tensors) != len(m.AdapterParams()) {
		t.Errorf("adapter file holds %d tensors, want %d", len(f.Tensors), len(m.AdapterParams()))
	}
	got, base, err := ReadAdapterConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank != 4 || got.Alpha != 16 || len(got.Modules()) != 3 || base != "" {
		t.Errorf("adapter config read back as %+v, base %q", got, base)
	}
	if _, err := tr.Step(batch1(batch)); err != nil {
		t.Fatal(err)
	}
	m2, tr2 := open(99) // other initial adapters: the checkpoint must replace them
	rng, err := tr2.LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(rng) != "rng" {
		t.Errorf("rng state %q", rng)
	}
	if _, err := tr2.Step(batch1(batch)); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.AdapterParams() {
		a, _ := m.ParamValues(p.Name)
		c, _ := m2.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s differs between the run and its resumption", p.Name)
		}
	}
	// A hot learning-rate change applies to the adapters at the next step: lr 0 freezes them.
	if err := tr2.SetSchedule(Schedule{BaseLR: 0}); err != nil {
		t.Fatal(err)
	}
	name := m2.AdapterParams()[0].Name
	before, _ := m2.ParamValues(name)
	if _, err := tr2.Step(batch1(batch)); err != nil {
		t.Fatal(err)
	}
	if after, _ := m2.ParamValues(name); !sameBits(before, after) {
		t.Error("a step with lr 0 changed an adapter")
	}
}

// TestLoRAMergedModel: the merged model (no adapters) computes what the adapted model does.
func TestLoRAMergedModel(t *testing.T) {
	b := testBackend(t)
	m := loraModel(t, smallGQA(), LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"k_proj", "o_proj", "gate_proj"}})
	merged, err := m.MergedModel()
	if err != nil {
		t.Fatal(err)
	}
	if merged.LoRA() != nil {
		t.Fatal("the merged model has adapters")
	}
	seqs := randomSeqs(rand.New(rand.NewPCG(4, 4)), m.Config.VocabSize, 9)
	ref := mergeRef(t, m, adapterValues(t, m))
	checkScorerAgainstReference(t, b, merged, ref, seqs)
	q0, _ := m.ParamValues("model.layers.0.self_attn.q_proj.weight")
	q1, _ := merged.ParamValues("model.layers.0.self_attn.q_proj.weight")
	if !sameBits(q0, q1) {
		t.Error("merging changed a projection without an adapter")
	}
}

// TestLoRAAdapterDirRoundTrip: saved adapters load into another model with the same
// configuration; bad configurations and files are errors that say what is wrong.
func TestLoRAAdapterDirRoundTrip(t *testing.T) {
	lc := LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"v_proj"}}
	m := loraModel(t, smallGQA(), lc)
	dir := t.TempDir()
	if err := m.SaveAdapters(dir, "Qwen/Qwen2.5-0.5B"); err != nil {
		t.Fatal(err)
	}
	got, base, err := ReadAdapterConfig(dir)
	if err != nil || base != "Qwen/Qwen2.5-0.5B" {
		t.Fatalf("config %+v, base %q, %v", got, base, err)
	}
	m2, err := NewModel(smallGQA(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.AddLoRA(got, 1); err != nil {
		t.Fatal(err)
	}
	if err := m2.LoadAdapters(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.AdapterParams() {
		a, _ := m.ParamValues(p.Name)
		c, _ := m2.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s changed in the round trip", p.Name)
		}
	}
	// A model expecting other targets refuses the file.
	m3, _ := NewModel(smallGQA(), 5)
	if err := m3.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"q_proj"}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := m3.LoadAdapters(dir); err == nil || !strings.Contains(err.Error(), "no tensor") {
		t.Errorf("loading adapters of other targets: %v", err)
	}
	for _, tc := range []struct {
		json, want string
	}{
		{`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "use_dora": true}`, "use_dora"},
		{`{"peft_type": "IA3", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}`, "peft_type"},
		{`{"peft_type": "LORA", "r": 0, "lora_alpha": 8, "target_modules": ["q_proj"]}`, "rank 0"},
		{`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["qproj"]}`, `target "qproj"`},
		{`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": "all-linear"}`, ""},
	} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, AdapterConfigFile), []byte(tc.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadAdapterConfig(d)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.json, err, tc.want)
		}
	}
}

func TestLoRAConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c    LoRAConfig
		want string
	}{
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q_proj"}}, ""},
		{LoRAConfig{Rank: -1, Alpha: 16, Targets: []string{"q_proj"}}, "rank"},
		{LoRAConfig{Rank: 8, Alpha: 0, Targets: []string{"q_proj"}}, "alpha"},
		{LoRAConfig{Rank: 8, Alpha: 16, Dropout: 1, Targets: []string{"q_proj"}}, "dropout"},
		{LoRAConfig{Rank: 8, Alpha: 16}, "no targets"},
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"lm_head"}}, "target"},
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q_proj"}, Init: "pissa"}, "init"},
	} {
		err := tc.c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want an error mentioning %q", tc.c, err, tc.want)
		}
	}
	if s := (LoRAConfig{Rank: 16, Alpha: 32, RSLoRA: true}).Scale(); math.Abs(s-8) > 1e-12 {
		t.Errorf("rsLoRA scale %v, want 32/√16 = 8", s)
	}
}
