package runtime

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"stx.dev/stx/runtime/cpu"
)

// Mixed precision (Model.ComputeDType BFloat16) is PyTorch autocast's: bfloat16 matrix products
// with float32 accumulation, everything else float32, float32 master weights and optimizer
// state. The graphs convert each product's operands to bfloat16 and its result back to float32
// (DotGeneralIn); how a backend then runs a bfloat16 product is its own: XLA compiles it (on
// CPU as on GPU, float32 accumulation rounded to bfloat16), stx's cpu backend uses OpenBLAS's
// cblas_sbgemm where the CPU has bfloat16 instructions and float32 sgemm on the widened
// operands elsewhere (same numerics), and the host decoder of its sampler rounds what the
// graph rounds (hostdecode.go).

// ComputeDTypeDescription says how backend b runs the products of a model whose compute
// dtype is dt, for the start of a run: "" for float32.
func (b *Backend) ComputeDTypeDescription(dt dtypes.DType) string {
	if dt == dtypes.InvalidDType || dt == dtypes.Float32 {
		return ""
	}
	name := dtypeName(dt)
	switch {
	case b.Plugin != nil || b.Name() == "xla":
		return fmt.Sprintf("xla backend: %s products compiled by XLA (f32 accumulation)", name)
	case b.Name() == "cpu":
		_, how := cpu.BF16MatMul()
		return "cpu backend: " + how
	}
	return fmt.Sprintf("%s backend: %s products by GoMLX's SimpleGo in Go (f32 accumulation; its conversions to %s truncate instead of rounding to nearest even)",
		b.Name(), name, name)
}

// ComputeDTypeLine is the start line of a role whose model computes in dt: what mixed
// precision means for it (a trainable role's master weights and optimizer state stay f32) and
// how backend b runs it; "" for float32.
func ComputeDTypeLine(role string, trainable bool, b *Backend, dt dtypes.DType) string {
	how := b.ComputeDTypeDescription(dt)
	if how == "" {
		return ""
	}
	what := "f32 weights"
	if trainable {
		what = "f32 master weights and AdamW"
	}
	name := dtypeName(dt)
	return fmt.Sprintf("%s: %s compute (%s matmuls, f32 accumulation, %s); %s", role, name, name, what, how)
}

// dtypeName is the short name of a compute dtype: "bf16", "f32".
func dtypeName(dt dtypes.DType) string {
	switch dt {
	case dtypes.BFloat16:
		return "bf16"
	case dtypes.Float32, dtypes.InvalidDType:
		return "f32"
	}
	return dt.String()
}
