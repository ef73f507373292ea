package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// attendRef is the float64 reference of Attend's output.
func attendRef(q, k, v []float32, scale float64, n int) []float64 {
	hd := len(q)
	sc := make([]float64, n)
	mx := math.Inf(-1)
	for j := range n {
		for i := range hd {
			sc[j] += float64(q[i]) * float64(k[j*hd+i])
		}
		sc[j] *= scale
		mx = max(mx, sc[j])
	}
	out := make([]float64, hd)
	den := 0.0
	for j := range n {
		e := math.Exp(sc[j] - mx)
		den += e
		for i := range hd {
			out[i] += e * float64(v[j*hd+i])
		}
	}
	for i := range out {
		out[i] /= den
	}
	return out
}

// TestAttend checks the attention kernel against float64 on lengths that leave remainders
// after the vector blocks, and that every instruction-set level gives the same bits.
func TestAttend(t *testing.T) {
	if !HasAttend {
		t.Skip("the C kernels are not compiled in")
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, hd := range []int{1, 3, 8, 13, 64, 128} {
		for _, n := range []int{1, 2, 5, 8, 97} {
			t.Run(fmt.Sprintf("hd%d/n%d", hd, n), func(t *testing.T) {
				q, k, v := make([]float32, hd), make([]float32, n*hd), make([]float32, n*hd)
				for _, s := range [][]float32{q, k, v} {
					for i := range s {
						s[i] = float32(r.NormFloat64()) * 2
					}
				}
				scale := float32(1 / math.Sqrt(float64(hd)))
				want := attendRef(q, k, v, float64(scale), n)
				var first []float32
				for _, level := range vecLevels() {
					scores, out := make([]float32, n), make([]float32, hd)
					vecAttendAt(level, q, k, v, scale, scores, out)
					for i, o := range out {
						if d := math.Abs(float64(o) - want[i]); d > 1e-5*(1+math.Abs(want[i])) {
							t.Fatalf("%s: out[%d] = %v, float64 reference %v", vecLevelName(level), i, o, want[i])
						}
					}
					if first == nil {
						first = out
					} else if !slices.Equal(out, first) {
						t.Fatalf("%s: %v, generic level %v", vecLevelName(level), out, first)
					}
				}
			})
		}
	}
}

func TestAttendShortSlicesPanic(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Attend(make([]float32, 4), make([]float32, 7), make([]float32, 8), 1, make([]float32, 2), make([]float32, 4))
}
