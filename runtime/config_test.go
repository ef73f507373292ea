package runtime

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The published configs, by their names in modelShapes.
var (
	llama2_7B  = modelShapes["llama2-7b"]
	llama32_1B = modelShapes["llama3.2-1b"]
	mistral7B  = modelShapes["mistral-7b-v0.1"]
	qwen25_05B = modelShapes["qwen2.5-0.5b"]
	qwen3_06B  = modelShapes["qwen3-0.6b"]
)

func TestParsePublishedConfigs(t *testing.T) {
	cases := []struct {
		name, json string
		want       Config
		params     int
	}{
		{"llama2-7b", llama2_7B, Config{Architecture: ArchLlama, VocabSize: 32000, Hidden: 4096, Layers: 32, Heads: 32,
			KVHeads: 32, Intermediate: 11008, RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositions: 4096, BOS: 1, EOS: 2,
			PAD: -1, InitStd: 0.02}, 6738415616},
		{"llama3.2-1b", llama32_1B, Config{Architecture: ArchLlama, VocabSize: 128256, Hidden: 2048, Layers: 16, Heads: 32,
			KVHeads: 8, Intermediate: 8192, RMSNormEps: 1e-5, RopeTheta: 500000, MaxPositions: 131072, TieEmbeddings: true,
			BOS: 128000, EOS: 128001, PAD: -1, InitStd: 0.02,
			RopeScaling: RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}}, 1235814400},
		{"mistral-7b-v0.1", mistral7B, Config{Architecture: ArchMistral, VocabSize: 32000, Hidden: 4096, Layers: 32,
			Heads: 32, KVHeads: 8, Intermediate: 14336, RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositions: 32768,
			SlidingWindow: 4096, BOS: 1, EOS: 2, PAD: -1, InitStd: 0.02}, 7241732096},
		{"qwen2.5-0.5b", qwen25_05B, Config{Architecture: ArchQwen2, VocabSize: 151936, Hidden: 896, Layers: 24, Heads: 14,
			KVHeads: 2, Intermediate: 4864, RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositions: 32768, TieEmbeddings: true,
			AttentionBias: true, BOS: 151643, EOS: 151643, PAD: -1, InitStd: 0.02}, 494032768},
		{"qwen3-0.6b", qwen3_06B, Config{Architecture: ArchQwen3, VocabSize: 151936, Hidden: 1024, Layers: 28, Heads: 16,
			KVHeads: 8, Intermediate: 3072, HeadDimension: 128, RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositions: 40960,
			TieEmbeddings: true, QKNorm: true, BOS: 151643, EOS: 151645, PAD: -1, InitStd: 0.02}, 596049920},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHFConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("parsed\n %+v\nwant\n %+v", got, tc.want)
			}
			if n := got.NumParams(); n != tc.params {
				t.Errorf("%d parameters, want %d", n, tc.params)
			}
			// HFConfigJSON → parse is the identity.
			js, err := got.HFConfigJSON()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseHFConfig(js)
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("round trip: %+v, %v\n%s", back, err, js)
			}
		})
	}
}

// TestRopeLlama3Frequencies checks the llama3 bands on Llama 3.2's settings: pairs whose
// wavelength is under 2048 positions keep their frequency, those over 8192 are divided by 32,
// those between are interpolated (monotonically, between the two).
func TestRopeLlama3Frequencies(t *testing.T) {
	c, err := ParseHFConfig([]byte(llama32_1B))
	if err != nil {
		t.Fatal(err)
	}
	plain := c
	plain.RopeScaling = RopeScaling{}
	got, base := c.RopeInvFreq(), plain.RopeInvFreq()
	kept, scaled, mid := 0, 0, 0
	for i := range got {
		wavelen := 2 * 3.141592653589793 / base[i]
		switch {
		case wavelen < 2048:
			kept++
			if got[i] != base[i] {
				t.Errorf("pair %d (wavelength %.0f): %g, want unchanged %g", i, wavelen, got[i], base[i])
			}
		case wavelen > 8192:
			scaled++
			if d := got[i] - base[i]/32; d > 1e-18 || d < -1e-18 {
				t.Errorf("pair %d (wavelength %.0f): %g, want %g/32", i, wavelen, got[i], base[i])
			}
		default:
			mid++
			if !(got[i] < base[i] && got[i] > base[i]/32) {
				t.Errorf("pair %d (wavelength %.0f): %g not between %g/32 and %g", i, wavelen, got[i], base[i], base[i])
			}
		}
	}
	if kept == 0 || scaled == 0 || mid == 0 {
		t.Fatalf("bands kept %d, scaled %d, interpolated %d: want all three", kept, scaled, mid)
	}
}

func TestParseHFConfigRefusals(t *testing.T) {
	edit := func(base string, kv map[string]any, drop ...string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(base), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range kv {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		js, _ := json.Marshal(m)
		return string(js)
	}
	supported := "qwen3 (Qwen3ForCausalLM)"
	cases := []struct {
		name, json string
		want       []string
	}{
		{"gemma3", edit(qwen3_06B, map[string]any{"model_type": "gemma3", "architectures": []string{"Gemma3ForCausalLM"}}),
			[]string{`unsupported architecture "Gemma3ForCausalLM"`, supported}},
		{"model_type only", edit(qwen3_06B, map[string]any{"model_type": "phi3"}, "architectures"),
			[]string{`unsupported model_type "phi3"`, supported}},
		{"mismatched", edit(qwen3_06B, map[string]any{"model_type": "qwen2"}), []string{`model_type "qwen2" does not match architecture "Qwen3ForCausalLM"`}},
		{"qwen3 moe", edit(qwen3_06B, map[string]any{"model_type": "qwen3_moe", "architectures": []string{"Qwen3MoeForCausalLM"}}),
			[]string{`unsupported architecture "Qwen3MoeForCausalLM"`}},
		{"experts", edit(qwen3_06B, map[string]any{"num_experts": 128}), []string{"mixture-of-experts", supported}},
		{"mixtral experts", edit(mistral7B, map[string]any{"num_local_experts": 8}), []string{"mixture-of-experts"}},
		{"yarn", edit(qwen3_06B, map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0}}),
			[]string{`rope_scaling type "yarn" is not supported (supported: linear, llama3)`}},
		{"dynamic", edit(llama2_7B, map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2.0}}),
			[]string{`rope_scaling type "dynamic" is not supported`}},
		{"llama3 incomplete", edit(llama32_1B, map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0}}),
			[]string{"rope_scaling llama3 needs"}},
		{"no max positions", edit(llama2_7B, nil, "max_position_embeddings"), []string{"max_position_embeddings is missing or not positive"}},
		{"zero max positions", edit(llama2_7B, map[string]any{"max_position_embeddings": 0}), []string{"max_position_embeddings is missing or not positive"}},
		{"pad beyond vocab", edit(llama2_7B, map[string]any{"pad_token_id": 1000000000}), []string{"pad_token_id 1000000000 is outside the vocabulary (vocab_size 32000)"}},
		{"eos beyond vocab", edit(llama2_7B, map[string]any{"eos_token_id": []any{32000, 2}}), []string{"eos_token_id 32000 is outside the vocabulary"}},
		{"fractional bos", edit(llama2_7B, map[string]any{"bos_token_id": 1.5}), []string{"bos_token_id 2147483647 is outside the vocabulary"}},
		{"huge max positions", edit(llama2_7B, map[string]any{"max_position_embeddings": 1 << 40}), []string{"max_position_embeddings 1099511627776 out of range"}},
		{"qwen sliding window", edit(qwen25_05B, map[string]any{"use_sliding_window": true}), []string{"use_sliding_window is not supported"}},
		{"layer types", edit(qwen3_06B, map[string]any{"layer_types": []string{"sliding_attention"}}), []string{`layer_types "sliding_attention"`}},
		{"gelu", edit(llama2_7B, map[string]any{"hidden_act": "gelu"}), []string{`unsupported hidden_act "gelu"`}},
		{"partial rotary", edit(llama2_7B, map[string]any{"partial_rotary_factor": 0.5}), []string{"partial_rotary_factor 0.5"}},
		{"mistral bias", edit(mistral7B, map[string]any{"attention_bias": true}), []string{"attention_bias is not supported"}},
		{"odd head dim", edit(qwen3_06B, map[string]any{"head_dim": 63}), []string{"head dimension 63 must be even"}},
		{"huge layers", edit(llama2_7B, map[string]any{"num_hidden_layers": 100000}), []string{"num_hidden_layers 100000 out of range"}},
		{"huge vocab", edit(llama2_7B, map[string]any{"vocab_size": 1 << 40}), []string{"vocab_size 1099511627776 out of range"}},
		{"negative hidden", edit(llama2_7B, map[string]any{"hidden_size": -4096}), []string{"hidden_size -4096 out of range"}},
		{"huge head dim", edit(qwen3_06B, map[string]any{"head_dim": 1 << 20}), []string{"head_dim 1048576 out of range"}},
		{"no architecture", edit(llama2_7B, nil, "architectures", "model_type"), []string{"neither"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHFConfig([]byte(tc.json))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// Every size within its bound, yet petabytes of weights: refused before any allocation.
	huge := edit(llama2_7B, map[string]any{"num_hidden_layers": 1024, "hidden_size": 65536, "intermediate_size": 1 << 20,
		"num_attention_heads": 64, "num_key_value_heads": 64})
	// Parsing reads nothing of the machine; reading the model directory or building the
	// model checks it.
	c, err := ParseHFConfig([]byte(huge))
	if err != nil {
		t.Fatalf("absurd model's config: %v", err)
	}
	if err := c.checkMemory(64<<30, "64 GiB"); err == nil || !strings.Contains(err.Error(), "GiB as float32, more than the 64.0 GiB of 64 GiB") {
		t.Errorf("absurd model against 64 GiB: %v", err)
	}
	if err := (Config{VocabSize: 10, Hidden: 4, Layers: 1, Heads: 1, KVHeads: 1, Intermediate: 8}).checkMemory(1<<20, "1 MiB"); err != nil {
		t.Errorf("a small model against 1 MiB: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(huge), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHFConfig(dir); err == nil || !strings.Contains(err.Error(), "GiB as float32, more than") {
		t.Errorf("absurd model directory: %v", err)
	}
	if _, err := InitHF([]byte(huge), 1, "F32"); err == nil || !strings.Contains(err.Error(), "GiB as float32, more than") {
		t.Errorf("absurd model built: %v", err)
	}
}

// TestLoadChecksHeadersBeforeData: a safetensors header that promises more data than its
// file holds, or tensors the config does not imply, is refused from the header alone.
func TestLoadChecksHeadersBeforeData(t *testing.T) {
	tc := archCases()[4]
	dir := writeArchCheckpoint(t, tc, 1)
	// A header of absurd shapes, with no data behind it.
	hdr := []byte(`{"model.embed_tokens.weight":{"dtype":"F32","shape":[4000000000,4000000000],"data_offsets":[0,64000000000000000000]}}`)
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	file = append(file, hdr...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadModel(dir)
	if err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("absurd header: %v", err)
	}
	t.Log(err)
	// A well-formed file of the wrong model: the shape is named from the header.
	other := writeArchCheckpoint(t, archCases()[5], 1)
	data, _ := os.ReadFile(filepath.Join(other, "model.safetensors"))
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(dir); err == nil || !strings.Contains(err.Error(), "has shape") {
		t.Fatalf("wrong model's weights: %v", err)
	}
}

// TestMemoryAvailable: where /proc/meminfo exists, the available memory is read (positive,
// and not more than the 1 TiB the limit falls back to).
func TestMemoryAvailable(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo")
	}
	if avail := MemoryAvailable(); avail == 0 || avail > 1<<40 {
		t.Fatalf("MemoryAvailable = %d", avail)
	}
}
