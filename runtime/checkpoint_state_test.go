package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadCheckpointChecksState: a state.json with counters or a schedule
// out of range is refused by LoadCheckpoint.
func TestLoadCheckpointChecksState(t *testing.T) {
	b := testBackend(t)
	m, err := NewModel(smallGQA(), 8)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{Kind: "constant", BaseLR: 1e-3, TotalSteps: 4}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tr.SaveCheckpoint(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.LoadCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{
		`{"format": "stx-checkpoint-v1", "step": -4, "adam_steps": 0, "schedule": {"Kind": "constant", "BaseLR": 0.001}}`,
		`{"format": "stx-checkpoint-v1", "step": 2, "adam_steps": 5, "schedule": {"Kind": "constant", "BaseLR": 0.001}}`,
		`{"format": "stx-checkpoint-v1", "step": 2, "adam_steps": 2, "schedule": {"Kind": "cosine", "BaseLR": -1}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.LoadCheckpoint(dir); err == nil || !strings.Contains(err.Error(), stateFile) {
			t.Errorf("state %s: %v", state, err)
		}
	}
}
