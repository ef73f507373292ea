package serve

import (
	"fmt"

	"stx.dev/stx/runtime"
)

// UpdateWeights loads the model directory dir, which must have the serving model's
// architecture and shapes, waits for the requests in flight, swaps the weights and sets the
// weight version: version when not empty, else the current one plus one when it is an
// integer, else the current one. A directory that cannot be loaded or another architecture is
// an error, and the old weights keep serving.
func (s *Server) UpdateWeights(dir, version string) (string, error) {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	if s.Sleeping() {
		return s.updateAsleep(dir, version)
	}
	// Read and check the new weights while the old ones serve.
	m, err := runtime.LoadModel(dir)
	if err != nil {
		return "", err
	}
	if err := sameArchitecture(s.cfg, m.Config); err != nil {
		return "", fmt.Errorf("%s: %w; the served model is kept", dir, err)
	}
	eng, err := s.newEngine(m)
	if err != nil {
		return "", err
	}
	s.mu.Lock() // waits for the requests in flight; later ones wait for the swap
	if s.eng == nil {
		s.mu.Unlock()
		eng.close()
		return "", fmt.Errorf("the server is shutting down")
	}
	old := s.eng
	s.eng = eng
	s.source = func() (*runtime.Model, error) { return runtime.LoadModel(dir) }
	version = s.nextVersion(version)
	s.mu.Unlock()
	old.close()
	fmt.Fprintf(s.log, "stx serve: weights from %s, weight version %s\n", dir, version)
	return version, nil
}

// sameArchitecture reports the first difference between two configs that changes what the
// model computes from the same kind of weights (special ids and the tokenizer aside: the
// server keeps its tokenizer).
func sameArchitecture(have, got runtime.Config) error {
	fields := []struct {
		name      string
		have, got any
	}{
		{"architecture", have.Architecture, got.Architecture},
		{"vocab_size", have.VocabSize, got.VocabSize},
		{"hidden_size", have.Hidden, got.Hidden},
		{"num_hidden_layers", have.Layers, got.Layers},
		{"num_attention_heads", have.Heads, got.Heads},
		{"num_key_value_heads", have.KVHeads, got.KVHeads},
		{"head_dim", have.HeadDim(), got.HeadDim()},
		{"intermediate_size", have.Intermediate, got.Intermediate},
		{"rms_norm_eps", have.RMSNormEps, got.RMSNormEps},
		{"rope_theta", have.RopeTheta, got.RopeTheta},
		{"rope_scaling", have.RopeScaling, got.RopeScaling},
		{"max_position_embeddings", have.MaxPositions, got.MaxPositions},
		{"sliding_window", have.SlidingWindow, got.SlidingWindow},
		{"tie_word_embeddings", have.TieEmbeddings, got.TieEmbeddings},
		{"attention_bias", have.AttentionBias, got.AttentionBias},
		{"output bias", have.OutputBias, got.OutputBias},
		{"query/key norm", have.QKNorm, got.QKNorm},
	}
	for _, f := range fields {
		if f.have != f.got {
			return fmt.Errorf("another model: %s is %v, the served model's is %v", f.name, f.got, f.have)
		}
	}
	return nil
}
