package engine

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/runtime/safetensors"
)

// TestMixedPrecisionGRPO: roles.actor.model.dtype "bfloat16" makes the actor (and its in-role
// reference) compute in bfloat16: the run says so at start, trains with finite metrics that
// differ from the float32 run's, gives the same metrics again with the same seed, and saves
// float32 weights and optimizer state.
func TestMixedPrecisionGRPO(t *testing.T) {
	sets := []string{"knobs.num_rollout=2", "knobs.rollout_batch_size=4", "knobs.n_samples_per_prompt=4",
		"knobs.eval_every=0", "knobs.save_every=2", "task.validation_size=8"}
	run := func(dtype string) (*Result, string) {
		t.Helper()
		var out bytes.Buffer
		cat := runCatalog(t, "grpo", append(sets, `roles.actor.model.dtype="`+dtype+`"`)...)
		res, err := Run(context.Background(), cat, "grpo", RunOptions{RunsDir: t.TempDir(), Out: &out, NoEvalBefore: true})
		if err != nil {
			t.Fatal(err)
		}
		return res, out.String()
	}
	bf, bfOut := run("bfloat16")
	bf2, _ := run("bfloat16")
	f32, f32Out := run("float32")

	if !strings.Contains(bfOut, "\nactor: bf16 compute (bf16 matmuls, f32 accumulation, f32 master weights and AdamW); ") {
		t.Errorf("no bf16 start line:\n%s", bfOut)
	}
	if strings.Contains(f32Out, "bf16") {
		t.Errorf("a float32 run mentions bf16:\n%s", f32Out)
	}

	trBF, trF32 := trainRecords(metrics(t, bf.Dir)), trainRecords(metrics(t, f32.Dir))
	if len(trBF) != 2 || len(trF32) != 2 {
		t.Fatalf("%d and %d train records, want 2", len(trBF), len(trF32))
	}
	differ := 0
	for i := range trBF {
		for _, key := range []string{"actor/loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"} {
			v := num(t, trBF[i], key)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("bf16 step %d: %s = %v", i+1, key, v)
			}
			if v != num(t, trF32[i], key) {
				differ++
			}
		}
	}
	t.Logf("bf16: loss %v entropy %v grad_norm %v; f32: loss %v entropy %v grad_norm %v",
		trBF[1]["actor/loss"], trBF[1]["actor/entropy"], trBF[1]["actor/grad_norm"],
		trF32[1]["actor/loss"], trF32[1]["actor/entropy"], trF32[1]["actor/grad_norm"])
	if differ == 0 {
		t.Error("the bf16 run's metrics equal the f32 run's: the dtype is ignored")
	}

	// Same seed, same metrics.
	a, b := comparable(metrics(t, bf.Dir)), comparable(metrics(t, bf2.Dir))
	if len(a) != len(b) {
		t.Fatalf("%d and %d records in two identical bf16 runs", len(a), len(b))
	}
	for i := range a {
		for k, v := range a[i] {
			if b[i][k] != v {
				t.Errorf("record %d %s: %v and %v in two identical bf16 runs", i, k, v, b[i][k])
			}
		}
	}

	// The checkpoint's weights and optimizer state are float32.
	dirs, _ := filepath.Glob(filepath.Join(bf.Dir, "checkpoints", "*", "actor"))
	if len(dirs) == 0 {
		t.Fatal("no checkpoint of the actor")
	}
	weights, err := safetensors.ReadDir(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	opt, err := safetensors.ReadFile(filepath.Join(dirs[0], "optimizer.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(weights) == 0 || len(opt.Tensors) == 0 {
		t.Fatalf("%d weights, %d optimizer tensors", len(weights), len(opt.Tensors))
	}
	for what, ts := range map[string]map[string]safetensors.Tensor{"weight": weights, "optimizer state": opt.Tensors} {
		for name, x := range ts {
			if x.DType != safetensors.F32 {
				t.Errorf("%s %s saved as %s", what, name, x.DType)
			}
		}
	}
}

// TestMixedPrecisionRefusedForVelocityModels: a flow role with model.dtype "bfloat16" stops at
// start with the reason (vet refuses it earlier, at the field).
func TestMixedPrecisionRefusedForVelocityModels(t *testing.T) {
	cat := runCatalog(t, "flow_grpo", "knobs.num_rollout=1")
	rec := cat.Recipes["flow_grpo"]
	if rec == nil {
		t.Skip("no flow_grpo recipe")
	}
	for i := range rec.Roles {
		rec.Roles[i].Model.DType = "bfloat16"
	}
	_, err := Run(context.Background(), cat, "flow_grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err == nil || !strings.Contains(err.Error(), VelocityDTypeReason) {
		t.Fatalf("error %v, want one with %q", err, VelocityDTypeReason)
	}
}
