package runtime

import (
	"fmt"
	"slices"
	"strings"

	"stx.dev/stx/runtime/safetensors"
)

// checkTensorHeaders matches the tensors of a checkpoint's headers against the tensors the
// config implies: every one present with its shape and a float dtype, and nothing else but
// rotary inv_freq buffers and a tied model's lm_head copy.
func checkTensorHeaders(c Config, heads map[string]safetensors.TensorInfo) error {
	want := map[string]bool{}
	for _, p := range paramList(c) {
		want[p.Name] = true
		h, ok := heads[p.Name]
		switch {
		case !ok:
			return fmt.Errorf("missing tensor %q (a %s model has it)", p.Name, c.Architecture)
		case !slices.Equal(h.Shape, p.Shape):
			return fmt.Errorf("%s: tensor %q has shape %v, want %v", h.File, p.Name, h.Shape, p.Shape)
		case !h.DType.IsFloat():
			return fmt.Errorf("%s: tensor %q has dtype %s, want a float type (F32, F16, BF16, F64)", h.File, p.Name, h.DType)
		}
	}
	var extra []string
	for name := range heads {
		if !want[name] && !strings.HasSuffix(name, "rotary_emb.inv_freq") && !(name == "lm_head.weight" && c.TieEmbeddings) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		if len(extra) > 5 {
			extra = append(extra[:5], "...")
		}
		return fmt.Errorf("unexpected tensors for a %s model: %s", c.Architecture, strings.Join(extra, ", "))
	}
	return nil
}
