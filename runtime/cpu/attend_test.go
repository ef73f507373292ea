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

// attendBF16Ref is AttendBF16 in Go, in the kernel's order of operations: dot8's eight
// interleaved partial sums, the softmax of softmaxUnnormalised (Exp32), weightedSum's four
// rows at a time.
func attendBF16Ref(q, k, v []float32, n int) []float32 {
	hd := len(q)
	round := func(f float32) float32 { return RoundBF16(f).Float32() }
	sc := make([]float32, n)
	for j := range n {
		var a [8]float32
		for i := 0; i < hd; i += 8 {
			for u := range 8 {
				if i+u < hd {
					a[u] += q[i+u] * k[j*hd+i+u]
				}
			}
		}
		sc[j] = round(((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])))
	}
	mx := float32(math.Inf(-1))
	for _, s := range sc {
		mx = max(mx, s)
	}
	var den float32
	for j := range sc {
		sc[j] = Exp32(sc[j] - mx)
		den += sc[j]
	}
	for j := range sc {
		sc[j] = round(sc[j])
	}
	out := make([]float32, hd)
	j := 0
	for ; j+4 <= n; j += 4 {
		for i := range out {
			out[i] += sc[j]*v[j*hd+i] + sc[j+1]*v[(j+1)*hd+i] + sc[j+2]*v[(j+2)*hd+i] + sc[j+3]*v[(j+3)*hd+i]
		}
	}
	for ; j < n; j++ {
		for i := range out {
			out[i] += sc[j] * v[j*hd+i]
		}
	}
	for i := range out {
		out[i] = round(out[i]) / den
	}
	return out
}

// TestAttendBF16: the bfloat16 attention kernel gives the bits of its Go statement at every
// instruction-set level.
func TestAttendBF16(t *testing.T) {
	if !HasAttend {
		t.Skip("the C kernels are not compiled in")
	}
	r := rand.New(rand.NewPCG(8, 8))
	for _, hd := range []int{1, 3, 8, 13, 64, 128} {
		for _, n := range []int{1, 2, 5, 8, 97} {
			t.Run(fmt.Sprintf("hd%d/n%d", hd, n), func(t *testing.T) {
				q, k, v := make([]float32, hd), make([]float32, n*hd), make([]float32, n*hd)
				for _, s := range [][]float32{q, k, v} {
					for i := range s {
						s[i] = RoundBF16(float32(r.NormFloat64()) * 2).Float32()
					}
				}
				want := attendBF16Ref(q, k, v, n)
				for _, level := range vecLevels() {
					scores, out := make([]float32, n), make([]float32, hd)
					vecAttendModeAt(level, q, k, v, 1, scores, out, true)
					if !slices.Equal(out, want) {
						t.Fatalf("%s: %v, Go %v", vecLevelName(level), out, want)
					}
				}
			})
		}
	}
}
