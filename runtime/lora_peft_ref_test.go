package runtime

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/internal/pyref"
)

// peftRef is the PEFT reference (scripts/fetch-peft.sh) with the interpreter that has torch.
func peftRef(t *testing.T) pyref.Ref {
	ref := pyref.Require(t, "peft", "", filepath.Join("peft", "__init__.py"), "fetch-peft.sh")
	if py, err := os.ReadFile(filepath.Join(ref.Dir, ".stx-python")); err == nil {
		ref.Python = strings.TrimSpace(string(py))
	}
	return ref
}

func runPEFT(t *testing.T, ref pyref.Ref, args ...string) []byte {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "scripts", "peft-check.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ref.Python, append([]string{script}, args...)...)
	cmd.Env = ref.Env("OMP_NUM_THREADS=1", "TRANSFORMERS_OFFLINE=1", "HF_HUB_OFFLINE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("peft-check.py %s: %v\n%s", args[0], err, stderr.String())
	}
	return out
}

// comparePEFT scores seqs with m (stx) and with PEFT on base + adapter, and requires the
// log-probs to agree within 1e-4.
func comparePEFT(t *testing.T, ref pyref.Ref, m *Model, base, adapter string, seqs [][]int32) {
	t.Helper()
	b := testBackend(t)
	sc, err := NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := sc.Score(seqs)
	if err != nil {
		t.Fatal(err)
	}
	// The adapters must matter, or the comparison would only check the base model.
	bsc, err := NewScorer(b, m.WithoutAdapters())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := bsc.Score(seqs)
	if err != nil {
		t.Fatal(err)
	}
	effect := 0.0
	for i := range seqs {
		for j, lp := range plain[i].LogProbs {
			effect = max(effect, math.Abs(float64(lp-ours[i].LogProbs[j])))
		}
	}
	if effect < 1e-3 {
		t.Fatalf("the adapters change the log-probs by at most %.2g: nothing to compare", effect)
	}
	rows, _ := json.Marshal(seqs)
	var theirs [][]float64
	if err := json.Unmarshal(runPEFT(t, ref, "score", base, adapter, string(rows)), &theirs); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range seqs {
		for j, want := range theirs[i] {
			d := math.Abs(float64(ours[i].LogProbs[j]) - want)
			worst = max(worst, d)
			if d > 1e-4 {
				t.Errorf("row %d token %d: stx %v, PEFT %v", i, j, ours[i].LogProbs[j], want)
			}
		}
	}
	t.Logf("max |stx − PEFT| log-prob %.2g (the adapters move them by up to %.2g)", worst, effect)
}

// TestLoRAAgainstPEFT: PEFT loads the adapter stx saved on the same base and computes the
// log-probs stx computes; stx loads an adapter PEFT made and computes PEFT's log-probs.
func TestLoRAAgainstPEFT(t *testing.T) {
	ref := peftRef(t)
	for _, arch := range []string{"llama", "qwen2"} {
		t.Run(arch, func(t *testing.T) {
			cfg, _ := BuiltinConfig("tiny")
			if arch == "qwen2" {
				cfg = smallGQA()
				cfg.Architecture, cfg.AttentionBias = ArchQwen2, true
			}
			base, err := NewModel(cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			baseDir := filepath.Join(t.TempDir(), "base")
			if err := base.SaveHF(baseDir, 0); err != nil {
				t.Fatal(err)
			}
			seqs := randomSeqs(rand.New(rand.NewPCG(5, 5)), cfg.VocabSize, 9, 14)

			// stx → PEFT.
			m, err := LoadModel(baseDir)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{LoRAAllLinear}}, 1); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(6, 6))
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
			ours := filepath.Join(t.TempDir(), "stx-adapter")
			if err := m.SaveAdapters(ours, baseDir); err != nil {
				t.Fatal(err)
			}
			comparePEFT(t, ref, m, baseDir, ours, seqs)

			// PEFT → stx.
			theirs := filepath.Join(t.TempDir(), "peft-adapter")
			runPEFT(t, ref, "make", baseDir, theirs, "4", "12", "q_proj,v_proj,down_proj")
			m2, err := LoadModel(baseDir)
			if err != nil {
				t.Fatal(err)
			}
			if err := m2.AttachAdapters(theirs); err != nil {
				t.Fatal(err)
			}
			if got := m2.LoRA(); got.Rank != 4 || got.Alpha != 12 || len(got.Modules()) != 3 {
				t.Fatalf("PEFT's adapter read as %+v", got)
			}
			comparePEFT(t, ref, m2, baseDir, theirs, seqs)
		})
	}
}
