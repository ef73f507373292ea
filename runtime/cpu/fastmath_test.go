package cpu

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
)

// TestExpf32 compares expf32 with the correctly rounded float64 exponential over the whole
// float32 domain that matters (a dense sweep plus the range edges and special values).
func TestExpf32(t *testing.T) {
	worst := 0.0
	check := func(x float32) {
		want := math.Exp(float64(x))
		got := float64(expf32(x))
		switch {
		case math.IsNaN(want):
			if !math.IsNaN(got) {
				t.Fatalf("expf32(%v) = %v, want NaN", x, got)
			}
			return
		case math.IsInf(want, 0) || want > math.MaxFloat32:
			if !math.IsInf(got, 1) {
				t.Fatalf("expf32(%v) = %v, want +Inf", x, got)
			}
			return
		}
		// Error in units of the float32 spacing at want.
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if ulp == 0 {
			return
		}
		if e := math.Abs(got-want) / ulp; e > worst {
			worst = e
		}
	}
	for x := float32(-100); x <= 100; x += 0.00173 {
		check(x)
	}
	for _, x := range []float32{0, -0, 1e-30, -1e-30, 87, -87, 87.0001, -87.0001, 88.72, 88.73, -103, -104,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		check(x)
	}
	if worst > 2 {
		t.Errorf("expf32: worst error %.2f ulp, want ≤ 2", worst)
	}
	t.Logf("expf32 worst error %.2f ulp", worst)
}

const opExp = backends.OpTypeExp

func BenchmarkExp(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%2000)/100 - 10
	}
	out := make([]float32, len(x))
	b.Run("expf32", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			unaryFloat32Fast(opExp, out, x)
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			unaryFloat(opExp, out, x)
		}
	})
}
