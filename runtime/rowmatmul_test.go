package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"stx.dev/stx/runtime/cpu/blas"
)

// TestRowMatMulRowIndependent: every output of rowMatMul is the same bits whatever the number
// of rows in the call, the worker split and the kernel (AVX-512, AVX2 or the scalar code), and within
// float32 rounding of a float64 reference; lengths leave remainders after every unrolled part.
// rowMatMulBF16 gives the bits of rowMatMul on the weights widened from bfloat16.
func TestRowMatMulRowIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	randVec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, k := range []int{1, 7, 15, 16, 17, 33, 64, 131} {
		for _, n := range []int{1, 3, 8, 11, 37} {
			const maxRows = 19
			x, w := randVec(maxRows*k), randVec(n*k)
			alone := make([]float32, maxRows*n)
			for r := range maxRows {
				rowMatMul(1, alone[r*n:(r+1)*n], w, x[r*k:(r+1)*k], 1, n, k)
				for j := range n {
					want := 0.0
					for i := range k {
						want += float64(x[r*k+i]) * float64(w[j*k+i])
					}
					if d := math.Abs(float64(alone[r*n+j]) - want); d > 1e-5*(1+math.Sqrt(float64(k))) {
						t.Fatalf("k=%d n=%d row %d col %d: %v, float64 reference %v", k, n, r, j, alone[r*n+j], want)
					}
				}
			}
			for rows := 1; rows <= maxRows; rows++ {
				for _, workers := range []int{1, 2, 3} {
					// The bfloat16 kernels on w rounded to bfloat16: the float32 kernels' bits
					// on the widened weights.
					bf, wide := make([]uint16, len(w)), make([]float32, len(w))
					for i, v := range w {
						bf[i] = uint16(math.Float32bits(v) >> 16)
						wide[i] = math.Float32frombits(uint32(bf[i]) << 16)
					}
					want16 := make([]float32, rows*n)
					rowMatMul(1, want16, wide, x, rows, n, k)
					for level := range kernelLevels {
						got, got16 := make([]float32, rows*n), make([]float32, rows*n)
						parallelFor(workers, n, func(_, lo, hi int) {
							rowMatMulSpan(got, n, w, x, rows, k, lo, hi, level)
							rowMatMulSpanBF16(got16, n, bf, x, rows, k, lo, hi, level)
						})
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(alone[i]) {
								t.Fatalf("k=%d n=%d rows=%d workers=%d kernel %d output %d: %v, row alone %v",
									k, n, rows, workers, level, i, got[i], alone[i])
							}
							if math.Float32bits(got16[i]) != math.Float32bits(want16[i]) {
								t.Fatalf("k=%d n=%d rows=%d workers=%d kernel %d output %d: bfloat16 weights %v, widened %v",
									k, n, rows, workers, level, i, got16[i], want16[i])
							}
						}
					}
				}
			}
		}
	}
	// Enough rows of a long input that the kernel splits them into chunks (see stx_rowmm_avx2).
	const k, n, rows = 4100, 5, 37
	x, w := randVec(rows*k), randVec(n*k)
	got, alone := make([]float32, rows*n), make([]float32, n)
	rowMatMul(2, got, w, x, rows, n, k)
	for r := range rows {
		rowMatMul(1, alone, w, x[r*k:(r+1)*k], 1, n, k)
		if !slices.Equal(got[r*n:(r+1)*n], alone) {
			t.Fatalf("k=%d, %d rows: row %d %v, alone %v", k, rows, r, got[r*n:(r+1)*n], alone)
		}
	}
}

// BenchmarkRowMatMul times the decode products of the 0.5B shape (hidden 896, q+k+v 1152,
// gate+up 9728, down from 4864) at 1, 8 and 64 rows, and those of the "bench" model (hidden
// 256: q+k+v 768, o 256, gate+up 1408, down from 704, head 2048; BenchmarkHostSampling's) at 8:
// rowMatMul against OpenBLAS's x·Wᵀ on the same [out, in] weights and its x·W on weights
// stored [in, out] (sgemmNN: the host decoder's layout before rowMatMul). GB/s counts the
// weights read once per call.
func BenchmarkRowMatMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][3]int{{1152, 896}, {9728, 896}, {896, 4864}, {768, 256, 8}, {256, 256, 8}, {1408, 256, 8}, {256, 704, 8}, {2048, 256, 8}} {
		n, k := s[0], s[1]
		w := make([]float32, n*k)
		for i := range w {
			w[i] = rng.Float32()
		}
		for _, rows := range []int{1, 8, 64} {
			if s[2] != 0 && rows != s[2] {
				continue
			}
			x, out := make([]float32, rows*k), make([]float32, rows*n)
			for i := range x {
				x[i] = rng.Float32()
			}
			for _, kernel := range []string{"row", "sgemm", "sgemmNN"} {
				b.Run(fmt.Sprintf("%s/%dx%dx%d", kernel, rows, n, k), func(b *testing.B) {
					cpu0 := processCPUSeconds()
					for b.Loop() {
						switch kernel {
						case "row":
							rowMatMul(runtime.GOMAXPROCS(0), out, w, x, rows, n, k)
						case "sgemm":
							blas.Sgemm(false, true, rows, n, k, 1, x, k, w, k, 0, out, n)
						default:
							blas.Sgemm(false, false, rows, n, k, 1, x, k, w, n, 0, out, n)
						}
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(2*rows*n*k)/((processCPUSeconds()-cpu0)/float64(b.N))/1e9, "GFLOP/cpu-s")
					b.ReportMetric(float64(4*n*k)/sec/1e9, "GB/s")
					b.ReportMetric(float64(2*rows*n*k)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}
