package runtime

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// fsdpConfig is a small model whose hidden width (27) makes the norm weights and several
// matrices sizes that divide neither by 2 nor by 4 devices: their shards are padded.
func fsdpConfig() Config {
	cfg := smallGQA()
	cfg.Hidden, cfg.HeadDimension, cfg.Intermediate = 27, 8, 37
	return cfg
}

// fsdpSteps are three steps of two micro-batches of 4 rows, normalised by the step's token
// count. (Rows that do not divide among the devices are TestDataParallelMatchesOneDevice's
// subject; one shape per graph keeps XLA's compilations few.)
func fsdpSteps(cfg Config, seed uint64) [][]map[string]*tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, seed))
	var steps [][]map[string]*tensors.Tensor
	for range 3 {
		mbs := []map[string]*tensors.Tensor{sftBatch(rng, cfg, 4, 12), sftBatch(rng, cfg, 4, 12)}
		setStepTokens(mbs)
		steps = append(steps, mbs)
	}
	return steps
}

// fsdpTrainer is a trainer of a fresh fsdpConfig model on devices, sharded or not.
func fsdpTrainer(t *testing.T, b *Backend, devices []int, fsdp bool) (*Trainer, *Model) {
	t.Helper()
	m, err := NewModel(fsdpConfig(), 9)
	if err != nil {
		t.Fatal(err)
	}
	// ε = 1e-3, as in TestDataParallelMatchesOneDevice: with 1e-8 a gradient at float32
	// rounding level becomes a step of up to lr.
	adam := DefaultAdamW()
	adam.Eps = 1e-3
	tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: adam, MaxGradNorm: 0.5,
		Schedule: Schedule{BaseLR: 1e-2}})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case fsdp:
		err = tr.SetFSDP(b, devices)
	case len(devices) > 0:
		err = tr.SetDevices(b, devices)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tr, m
}

func worstWeightDiff(t *testing.T, a, b *Model) float64 {
	t.Helper()
	var worst float64
	for _, p := range a.Params() {
		x, err := a.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for j := range x {
			worst = max(worst, math.Abs(float64(x[j]-y[j])))
		}
	}
	return worst
}

// TestDataParallelFSDPMatchesOneDevice trains with sharded parameters and AdamW state on 2 and
// 4 devices: losses, metrics, gradient norms and the weights after three steps (two
// micro-batches each, clipping on) agree with one device's, and each device holds about 1/N
// of the bytes of weights and optimizer state that one device holds alone (which is what each
// device holds replicated: TestDataParallelFSDPBenchModelMemory and fsdp.txtar measure that).
func TestDataParallelFSDPMatchesOneDevice(t *testing.T) {
	b := devicesBackend(t, 4)
	steps := fsdpSteps(fsdpConfig(), 5)
	m0, err := NewModel(fsdpConfig(), 9)
	if err != nil {
		t.Fatal(err)
	}
	odd := ""
	for _, p := range m0.Params() {
		if shapeSize(p.Shape)%2 != 0 {
			odd = p.Name
		}
	}
	if odd == "" {
		t.Fatal("fsdpConfig has no tensor of odd size: no shard is padded")
	}
	train := func(devices []int, fsdp bool) ([]StepResult, *Model, map[int]int64) {
		tr, m := fsdpTrainer(t, b, devices, fsdp)
		var res []StepResult
		for _, mbs := range steps {
			r, err := tr.Step(mbs)
			if err != nil {
				t.Fatalf("devices %v fsdp %v: %v", devices, fsdp, err)
			}
			res = append(res, r)
		}
		bytes, err := tr.DeviceStateBytes()
		if err != nil {
			t.Fatal(err)
		}
		return res, m, bytes
	}
	close := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }
	want, ref, alone := train([]int{0}, false)
	for _, devices := range [][]int{{0, 1}, {3, 2, 1, 0}} {
		n := len(devices)
		got, m, sharded := train(devices, true)
		for i := range want {
			g, w := got[i], want[i]
			if !close(g.Loss, w.Loss, 1e-5) || !close(g.GradNorm, w.GradNorm, 1e-4) ||
				!close(g.Metrics["entropy"], w.Metrics["entropy"], 1e-5) ||
				!close(g.Metrics["entropy_max"], w.Metrics["entropy_max"], 1e-6) {
				t.Errorf("fsdp on %v step %d: loss %v grad norm %v metrics %v; one device: %v %v %v",
					devices, i, g.Loss, g.GradNorm, g.Metrics, w.Loss, w.GradNorm, w.Metrics)
			}
		}
		worst := worstWeightDiff(t, ref, m)
		if worst > 2e-6 {
			t.Errorf("fsdp on %v: weights differ from one device's by up to %g", devices, worst)
		}
		t.Logf("fsdp on %d devices: loss %.6f (one device %.6f), largest weight difference %.2g; "+
			"per-device bytes of weights + optimizer state: one device %v, fsdp %v",
			n, got[2].Loss, want[2].Loss, worst, alone, sharded)
		for _, d := range devices {
			r, s := alone[0], sharded[d]
			// Shards are padded to a multiple of n elements: at most n−1 extra per tensor.
			if r == 0 || float64(s*int64(n)) < float64(r) || float64(s*int64(n)) > 1.01*float64(r) {
				t.Errorf("fsdp on %v: device %d holds %d bytes, replicated %d: want ≈ 1/%d", devices, d, s, r, n)
			}
		}
	}
}

// TestDataParallelFSDPCheckpointLoadsAnywhere saves a checkpoint from a trainer sharded on 2
// devices: it is the ordinary checkpoint (the parameters' shapes, no padding), and resuming it
// on one device and sharded on 4 gives the next step's loss and weights of the trainer that
// wrote it.
func TestDataParallelFSDPCheckpointLoadsAnywhere(t *testing.T) {
	b := devicesBackend(t, 4)
	var steps [][]map[string]*tensors.Tensor
	for _, mbs := range fsdpSteps(fsdpConfig(), 7) {
		steps = append(steps, mbs[:1]) // one micro-batch a step: one graph for XLA to compile
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	src, srcModel := fsdpTrainer(t, b, []int{0, 1}, true)
	for _, mbs := range steps[:2] {
		if _, err := src.Step(mbs); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.SaveCheckpoint(dir, nil); err != nil {
		t.Fatal(err)
	}
	want, err := src.Step(steps[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		devices []int
		fsdp    bool
	}{{nil, false}, {[]int{0, 1, 2, 3}, true}} {
		tr, m := fsdpTrainer(t, b, tc.devices, tc.fsdp)
		if _, err := tr.LoadCheckpoint(dir); err != nil {
			t.Fatalf("devices %v: %v", tc.devices, err)
		}
		got, err := tr.Step(steps[2])
		if err != nil {
			t.Fatal(err)
		}
		worst := worstWeightDiff(t, srcModel, m)
		t.Logf("resumed on %v (fsdp %v): loss %.7f, writer %.7f; largest weight difference %.2g",
			tc.devices, tc.fsdp, got.Loss, want.Loss, worst)
		if math.Abs(got.Loss-want.Loss) > 1e-5*(1+math.Abs(want.Loss)) || worst > 2e-6 {
			t.Errorf("resumed on %v (fsdp %v): loss %v, want %v; weights differ by %g", tc.devices, tc.fsdp, got.Loss, want.Loss, worst)
		}
	}
}

// TestDataParallelFSDPLoRAWithRecompute shards a LoRA model's adapters (its frozen base stays
// replicated) with activation checkpointing on: the adapters after three steps on 2 devices
// are those of one device.
func TestDataParallelFSDPLoRAWithRecompute(t *testing.T) {
	b := devicesBackend(t, 2)
	if backendIsXLA(b) {
		t.Skip("the same graphs as on the cpu backend; XLA runs the dense model's cases")
	}
	cfg := fsdpConfig()
	steps := fsdpSteps(cfg, 11)
	train := func(devices []int) *Model {
		m := loraModel(t, cfg, LoRAConfig{Rank: 3, Alpha: 6, Targets: []string{LoRAAllLinear}})
		m.ActivationCheckpointing = true
		adam := DefaultAdamW()
		adam.Eps = 1e-3
		tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: adam, Schedule: Schedule{BaseLR: 1e-2}})
		if err != nil {
			t.Fatal(err)
		}
		if len(devices) > 1 {
			if err := tr.SetFSDP(b, devices); err != nil {
				t.Fatal(err)
			}
		}
		for _, mbs := range steps {
			if _, err := tr.Step(mbs); err != nil {
				t.Fatalf("devices %v: %v", devices, err)
			}
		}
		return m
	}
	ref, got := train([]int{0}), train([]int{0, 1})
	var worst, moved float64
	for _, p := range ref.AdapterParams() {
		a, err := variableValues(ref.Variable(p.Name), "model", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := variableValues(got.Variable(p.Name), "model", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		start := loraModel(t, cfg, LoRAConfig{Rank: 3, Alpha: 6, Targets: []string{LoRAAllLinear}})
		s, err := variableValues(start.Variable(p.Name), "model", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for j := range a {
			worst = max(worst, math.Abs(float64(a[j]-c[j])))
			moved = max(moved, math.Abs(float64(a[j]-s[j])))
		}
	}
	t.Logf("LoRA adapters sharded on 2 devices: largest difference from one device %.2g (largest change in training %.2g)", worst, moved)
	if worst > 2e-6 || moved < 1e-3 {
		t.Errorf("adapters differ from one device's by %g (trained by %g)", worst, moved)
	}
}

// TestDataParallelFSDPBenchModelMemory measures what each device holds on the "bench" model's
// shape (4.3 M parameters) after one step, replicated and sharded on 2 and 4 devices (the
// figures of docs/devices.md).
func TestDataParallelFSDPBenchModelMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bench model four times")
	}
	b := devicesBackend(t, 4)
	if backendIsXLA(b) {
		t.Skip("the cpu backend's figures are the same; XLA would compile the bench model's step four times")
	}
	cfg, _ := BuiltinConfig("bench")
	rng := rand.New(rand.NewPCG(3, 3))
	mb := sftBatch(rng, cfg, 4, 8)
	mb["den"] = tensors.FromScalar(float32(32))
	for _, n := range []int{2, 4} {
		devices := []int{0, 1, 2, 3}[:n]
		var got [2]int64
		for k, fsdp := range []bool{false, true} {
			m, err := NewModel(cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-3}})
			if err != nil {
				t.Fatal(err)
			}
			if fsdp {
				err = tr.SetFSDP(b, devices)
			} else {
				err = tr.SetDevices(b, devices)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Step([]map[string]*tensors.Tensor{mb}); err != nil {
				t.Fatal(err)
			}
			bytes, err := tr.DeviceStateBytes()
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devices {
				if bytes[d] != bytes[0] {
					t.Errorf("fsdp %v on %d devices: device %d holds %d bytes, device 0 %d", fsdp, n, d, bytes[d], bytes[0])
				}
			}
			got[k] = bytes[0]
		}
		t.Logf("bench model on %d devices: each device holds %.1f MB of weights + AdamW moments replicated, %.2f MB sharded (fsdp)",
			n, float64(got[0])/1e6, float64(got[1])/1e6)
		if r := float64(got[1]*int64(n)) / float64(got[0]); r < 1 || r > 1.001 {
			t.Errorf("on %d devices fsdp holds %d bytes per device, replicated %d: ratio ×%d = %.4f, want ≈ 1", n, got[1], got[0], n, r)
		}
	}
}

// TestDataParallelFSDPErrors: fsdp needs two devices, and a loss that reads a trainable
// variable around the models' weight lookup fails the step instead of training it wrongly.
func TestDataParallelFSDPErrors(t *testing.T) {
	b := devicesBackend(t, 2)
	tr, _ := fsdpTrainer(t, b, nil, false)
	if err := tr.SetFSDP(b, []int{1}); err == nil || !strings.Contains(err.Error(), "at least 2 devices") {
		t.Errorf("fsdp on one device: error %v", err)
	}
	m, err := NewModel(fsdpConfig(), 9)
	if err != nil {
		t.Fatal(err)
	}
	direct := func(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
		loss, mets := tokenSumLoss(ctx, m, batch)
		w := m.Variable("model.norm.weight").ValueGraph(loss.Graph())
		return Add(loss, ReduceAllSum(w)), mets
	}
	tr, err = NewTrainer(b, m, direct, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetFSDP(b, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	_, err = tr.Step(fsdpSteps(fsdpConfig(), 1)[0])
	if err == nil || !strings.Contains(err.Error(), "model.norm.weight without the models' weight lookup") {
		t.Errorf("a loss reading a weight directly: error %v", err)
	}
}

// TestDataParallelFSDPCountsForwardCopy: a forward pass of the role on device 0 (its scorer)
// puts the model's full weights there, which DeviceStateBytes counts until the next step
// leaves them on the host again.
func TestDataParallelFSDPCountsForwardCopy(t *testing.T) {
	b := devicesBackend(t, 2)
	steps := fsdpSteps(fsdpConfig(), 13)
	tr, m := fsdpTrainer(t, b, []int{0, 1}, true)
	measure := func() map[int]int64 {
		if _, err := tr.Step(steps[0][:1]); err != nil {
			t.Fatal(err)
		}
		bytes, err := tr.DeviceStateBytes()
		if err != nil {
			t.Fatal(err)
		}
		return bytes
	}
	before := measure()
	scoreOn(t, b, m, [][]int32{{3, 4, 5, 6}})
	after, err := tr.DeviceStateBytes()
	if err != nil {
		t.Fatal(err)
	}
	var weights int64
	for _, p := range m.Params() {
		weights += int64(4 * shapeSize(p.Shape))
	}
	t.Logf("per device before a forward pass %v, after %v (weights %d bytes)", before, after, weights)
	if after[0] != before[0]+weights || after[1] != before[1] {
		t.Errorf("after a forward pass on device 0: %v, want %v plus %d bytes on device 0", after, before, weights)
	}
	if again := measure(); again[0] != before[0] || again[1] != before[1] {
		t.Errorf("after the next step: %v, want %v", again, before)
	}
}
