//go:build cgo && !noopenblas

package runtime

/*
#cgo CFLAGS: -O3 -std=gnu11
#cgo LDFLAGS: -lm
#include <immintrin.h>
#include <math.h>

// Every output of stx_rowmm is the same function of its input row and weight row, whatever
// the tile that computes it and whatever the instruction set: sixteen partial sums s_l = fma
// chains over k ≡ l (mod 16) below K16 = K − K mod 16; then a_l = s_l + s_{l+8} (l < 8),
// reduced as ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)); then the last K mod 16 products fused in
// one at a time. The AVX-512 tiles keep the sixteen partial sums in the lanes of one register,
// the AVX2 tiles in two (lanes 0–7 and 8–15), the generic code in an array, all with the same
// operations.

static inline float stx_tail(float s, const float *x, const float *w, int k, int K) {
	for (; k < K; k++) s = fmaf(x[k], w[k], s);
	return s;
}

static inline float stx_reduce16(const float *s) {
	float a[8];
	for (int l = 0; l < 8; l++) a[l] = s[l] + s[l + 8];
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float stx_dot_generic(const float *x, const float *w, int K) {
	float s[16] = {0};
	int K16 = K & ~15;
	for (int k = 0; k < K16; k += 16)
		for (int l = 0; l < 16; l++) s[l] = fmaf(x[k + l], w[k + l], s[l]);
	return stx_tail(stx_reduce16(s), x, w, K16, K);
}

static void stx_rowmm_generic(const float *x, int rows, int K, const float *w, int j0, int j1, float *out, int ldo) {
	for (int j = j0; j < j1; j++)
		for (int r = 0; r < rows; r++) out[(long)r * ldo + j] = stx_dot_generic(x + (long)r * K, w + (long)j * K, K);
}

// The bfloat16 variants read weights stored as bfloat16 (the upper half of a float32): each is
// widened exactly, so they compute the same bits as the float32 code on the widened weights.
static inline float stx_bf(unsigned short b) {
	union { unsigned int u; float f; } v = {.u = (unsigned int)b << 16};
	return v.f;
}

static inline float stx_tail_bf(float s, const float *x, const unsigned short *w, int k, int K) {
	for (; k < K; k++) s = fmaf(x[k], stx_bf(w[k]), s);
	return s;
}

static float stx_dot_generic_bf(const float *x, const unsigned short *w, int K) {
	float s[16] = {0};
	int K16 = K & ~15;
	for (int k = 0; k < K16; k += 16)
		for (int l = 0; l < 16; l++) s[l] = fmaf(x[k + l], stx_bf(w[k + l]), s[l]);
	return stx_tail_bf(stx_reduce16(s), x, w, K16, K);
}

static void stx_rowmm_generic_bf(const float *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo) {
	for (int j = j0; j < j1; j++)
		for (int r = 0; r < rows; r++) out[(long)r * ldo + j] = stx_dot_generic_bf(x + (long)r * K, w + (long)j * K, K);
}

// STX_DRIVER(NAME, WT, TILE, RMAX, CW): weight columns in the outer loop, so that a tile's
// weights (C·K values) stay in cache while every group of at most RMAX input rows passes over
// them: the weights stream from memory once per chunk of input rows, the rows of a group share
// every weight load in registers, and a chunk of rows (about 512 KiB of inputs, a multiple of
// RMAX rows) stays in cache while the weights pass. TILE(R, C, ...) computes R rows by C
// weight rows; CW(R) is the widest C the tiles have for a group of R rows; columns left over at
// the end of a span go one at a time.
#define STX_DRIVER(NAME, WT, TILE, RMAX, CW)                                                                \
	static void NAME(const float *x, int rows, int K, const WT *w, int j0, int j1, float *out, int ldo) {   \
		int chunk = (512 << 10) / (4 * K) / RMAX * RMAX;                                                    \
		if (chunk < RMAX) chunk = RMAX;                                                                     \
		for (int r0 = 0; r0 < rows; r0 += chunk) {                                                          \
			int r1 = rows - r0 < chunk ? rows : r0 + chunk;                                                 \
			int cw = CW(r1 - r0 < RMAX ? r1 - r0 : RMAX);                                                   \
			for (int j = j0; j < j1;) {                                                                     \
				int c = j1 - j < cw ? 1 : cw;                                                               \
				for (int r = r0; r < r1; r += RMAX) {                                                       \
					int rr = r1 - r < RMAX ? r1 - r : RMAX;                                                 \
					TILE(rr, c, x + (long)r * K, K, w + (long)j * K, out + (long)r * ldo + j, ldo);         \
				}                                                                                           \
				j += c;                                                                                     \
			}                                                                                               \
		}                                                                                                   \
	}

#pragma GCC push_options
#pragma GCC target("avx2,fma")

static inline float stx_reduce_avx2(__m256 a) {
	// Lanes l and l+4, then 0+2 and 1+3, then the two: the order of stx_reduce16's a.
	__m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 h = _mm_add_ps(v, _mm_movehl_ps(v, v));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

static inline __m256 stx_load_f32(const float *p) { return _mm256_loadu_ps(p); }

static inline __m256 stx_load_bf(const unsigned short *p) {
	__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// STX_TILE2_T(NAME, WT, LOAD, TAIL, R, C): R input rows times C weight rows with AVX2: two
// accumulators per output (partial sums 0–7 and 8–15), each weight vector loaded once for the
// R rows, each input vector once for the C weight rows.
#define STX_TILE2_T(NAME, WT, LOAD, TAIL, R, C)                                                         \
	static void NAME(const float *x, int K, const WT *w, float *out, int ldo) {                         \
		__m256 lo[R][C], hi[R][C];                                                                      \
		for (int r = 0; r < R; r++)                                                                     \
			for (int c = 0; c < C; c++) lo[r][c] = hi[r][c] = _mm256_setzero_ps();                      \
		int K16 = K & ~15;                                                                              \
		for (int k = 0; k < K16; k += 16) {                                                             \
			__m256 wv[C];                                                                               \
			for (int c = 0; c < C; c++) wv[c] = LOAD(w + (long)c * K + k);                              \
			for (int r = 0; r < R; r++) {                                                               \
				__m256 xv = _mm256_loadu_ps(x + (long)r * K + k);                                       \
				for (int c = 0; c < C; c++) lo[r][c] = _mm256_fmadd_ps(xv, wv[c], lo[r][c]);            \
			}                                                                                           \
			for (int c = 0; c < C; c++) wv[c] = LOAD(w + (long)c * K + k + 8);                          \
			for (int r = 0; r < R; r++) {                                                               \
				__m256 xv = _mm256_loadu_ps(x + (long)r * K + k + 8);                                   \
				for (int c = 0; c < C; c++) hi[r][c] = _mm256_fmadd_ps(xv, wv[c], hi[r][c]);            \
			}                                                                                           \
		}                                                                                               \
		for (int r = 0; r < R; r++)                                                                     \
			for (int c = 0; c < C; c++)                                                                 \
				out[(long)r * ldo + c] = TAIL(stx_reduce_avx2(_mm256_add_ps(lo[r][c], hi[r][c])),      \
				                              x + (long)r * K, w + (long)c * K, K16, K);                \
	}

#define STX_TILE2(R, C)                                                             \
	STX_TILE2_T(stx_t2_##R##_##C, float, stx_load_f32, stx_tail, R, C)              \
	STX_TILE2_T(stx_t2bf_##R##_##C, unsigned short, stx_load_bf, stx_tail_bf, R, C)

// One row alone: up to five weight rows per tile; groups of two rows: three, and three for
// the last row of an odd count (2·R·C + C + 1 ≤ 16 registers); a span's last columns one at
// a time.
STX_TILE2(1, 1) STX_TILE2(1, 3) STX_TILE2(1, 5) STX_TILE2(2, 1) STX_TILE2(2, 3)

#define STX_CW2(R) ((R) == 1 ? 5 : 3)
#define STX_T2(R, C, ...)                                                                                   \
	((R) == 1 ? ((C) == 1 ? stx_t2_1_1(__VA_ARGS__) : (C) == 3 ? stx_t2_1_3(__VA_ARGS__) : stx_t2_1_5(__VA_ARGS__)) \
	          : ((C) == 1 ? stx_t2_2_1(__VA_ARGS__) : stx_t2_2_3(__VA_ARGS__)))
#define STX_T2BF(R, C, ...)                                                                                         \
	((R) == 1 ? ((C) == 1 ? stx_t2bf_1_1(__VA_ARGS__) : (C) == 3 ? stx_t2bf_1_3(__VA_ARGS__) : stx_t2bf_1_5(__VA_ARGS__)) \
	          : ((C) == 1 ? stx_t2bf_2_1(__VA_ARGS__) : stx_t2bf_2_3(__VA_ARGS__)))

STX_DRIVER(stx_rowmm_avx2, float, STX_T2, 2, STX_CW2)
STX_DRIVER(stx_rowmm_avx2_bf, unsigned short, STX_T2BF, 2, STX_CW2)

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

static inline float stx_reduce_avx512(__m512 a) {
	// a_l = s_l + s_{l+8}, then stx_reduce_avx2's order.
	__m256 h = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
	return stx_reduce_avx2(_mm256_add_ps(_mm512_castps512_ps256(a), h));
}

static inline __m512 stx_load16_f32(const float *p) { return _mm512_loadu_ps(p); }

static inline __m512 stx_load16_bf(const unsigned short *p) {
	__m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
	return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// STX_TILE5_T(NAME, WT, LOAD, TAIL, R, C): R input rows times C weight rows with AVX-512: one
// accumulator per output (its sixteen lanes the sixteen partial sums), R·C + C + 1 ≤ 32
// registers.
#define STX_TILE5_T(NAME, WT, LOAD, TAIL, R, C)                                                         \
	static void NAME(const float *x, int K, const WT *w, float *out, int ldo) {                         \
		__m512 acc[R][C];                                                                               \
		for (int r = 0; r < R; r++)                                                                     \
			for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();                               \
		int K16 = K & ~15;                                                                              \
		for (int k = 0; k < K16; k += 16) {                                                             \
			__m512 wv[C];                                                                               \
			for (int c = 0; c < C; c++) wv[c] = LOAD(w + (long)c * K + k);                              \
			for (int r = 0; r < R; r++) {                                                               \
				__m512 xv = _mm512_loadu_ps(x + (long)r * K + k);                                       \
				for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);          \
			}                                                                                           \
		}                                                                                               \
		for (int r = 0; r < R; r++)                                                                     \
			for (int c = 0; c < C; c++)                                                                 \
				out[(long)r * ldo + c] = TAIL(stx_reduce_avx512(acc[r][c]), x + (long)r * K, w + (long)c * K, K16, K); \
	}

#define STX_TILE5(R, C)                                                               \
	STX_TILE5_T(stx_t5_##R##_##C, float, stx_load16_f32, stx_tail, R, C)              \
	STX_TILE5_T(stx_t5bf_##R##_##C, unsigned short, stx_load16_bf, stx_tail_bf, R, C)

// Up to four rows: one group, whose rows share every weight load (such a product is bound by
// reading the weights), in the widest tile for its rows; more: groups of four rows by six
// weight rows, whose weights stay in the first-level cache while every group passes. Measured
// per core against eight rows by three (all rows sharing each weight load): 8 rows × 896 × 4864
// 0.35 ms against 0.66, 64 × 9728 × 896 6.8 ms against 12.2 (bfloat16 weights). A span's last
// columns go one at a time.
STX_TILE5(1, 1) STX_TILE5(1, 6) STX_TILE5(1, 8)
STX_TILE5(2, 1) STX_TILE5(2, 6) STX_TILE5(2, 8)
STX_TILE5(3, 1) STX_TILE5(3, 6)
STX_TILE5(4, 1) STX_TILE5(4, 5) STX_TILE5(4, 6)

typedef void (*stx_tile_fn)(const float *, int, const float *, float *, int);
typedef void (*stx_tilebf_fn)(const float *, int, const unsigned short *, float *, int);

// stx_t5[R-1][C-1] (only the C that STX_CW5, STX_CW5B and the driver ask for).
static const stx_tile_fn stx_t5[4][8] = {
	{stx_t5_1_1, 0, 0, 0, 0, stx_t5_1_6, 0, stx_t5_1_8},
	{stx_t5_2_1, 0, 0, 0, 0, stx_t5_2_6, 0, stx_t5_2_8},
	{stx_t5_3_1, 0, 0, 0, 0, stx_t5_3_6},
	{stx_t5_4_1, 0, 0, 0, stx_t5_4_5, stx_t5_4_6},
};

static const stx_tilebf_fn stx_t5bf[4][8] = {
	{stx_t5bf_1_1, 0, 0, 0, 0, stx_t5bf_1_6, 0, stx_t5bf_1_8},
	{stx_t5bf_2_1, 0, 0, 0, 0, stx_t5bf_2_6, 0, stx_t5bf_2_8},
	{stx_t5bf_3_1, 0, 0, 0, 0, stx_t5bf_3_6},
	{stx_t5bf_4_1, 0, 0, 0, stx_t5bf_4_5, stx_t5bf_4_6},
};

// STX_CW5(R): the widest tile for a lone group of R rows (R·C + C + 1 ≤ 32 registers);
// STX_CW5B: six, for the groups of more rows.
static const int stx_cw5[5] = {0, 8, 8, 6, 5};
#define STX_CW5(R) stx_cw5[R]
#define STX_CW5B(R) 6
#define STX_T5(R, C, ...) stx_t5[(R) - 1][(C) - 1](__VA_ARGS__)
#define STX_T5BF(R, C, ...) stx_t5bf[(R) - 1][(C) - 1](__VA_ARGS__)

STX_DRIVER(stx_rowmm_avx512_few, float, STX_T5, 4, STX_CW5)
STX_DRIVER(stx_rowmm_avx512_many, float, STX_T5, 4, STX_CW5B)
STX_DRIVER(stx_rowmm_avx512_bf_few, unsigned short, STX_T5BF, 4, STX_CW5)
STX_DRIVER(stx_rowmm_avx512_bf_many, unsigned short, STX_T5BF, 4, STX_CW5B)

static void stx_rowmm_avx512(const float *x, int rows, int K, const float *w, int j0, int j1, float *out, int ldo) {
	if (rows <= 4)
		stx_rowmm_avx512_few(x, rows, K, w, j0, j1, out, ldo);
	else
		stx_rowmm_avx512_many(x, rows, K, w, j0, j1, out, ldo);
}

static void stx_rowmm_avx512_bf(const float *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo) {
	if (rows <= 4)
		stx_rowmm_avx512_bf_few(x, rows, K, w, j0, j1, out, ldo);
	else
		stx_rowmm_avx512_bf_many(x, rows, K, w, j0, j1, out, ldo);
}

#pragma GCC pop_options

// stx_level: 2 with AVX-512, 1 with AVX2 and FMA, 0 without (the generic code); -1 unknown yet.
static int stx_level = -1;

static int stx_isa(void) {
	if (stx_level < 0) {
		__builtin_cpu_init();
		int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
		stx_level = avx2 && __builtin_cpu_supports("avx512f") ? 2 : avx2;
	}
	return stx_level;
}

// stx_rowmm sets out[r·ldo + j] = x_r · w_j for r < rows, j0 ≤ j < j1 (x [rows, K], w [·, K])
// with the widest kernel the CPU has, capped at level (0: the scalar code, 1: AVX2; tests).
// stx_rowmm_bf: w holds bfloat16 values.
static void stx_rowmm(const float *x, int rows, int K, const float *w, int j0, int j1, float *out, int ldo, int level) {
	int isa = stx_isa() < level ? stx_isa() : level;
	if (isa == 2)
		stx_rowmm_avx512(x, rows, K, w, j0, j1, out, ldo);
	else if (isa == 1)
		stx_rowmm_avx2(x, rows, K, w, j0, j1, out, ldo);
	else
		stx_rowmm_generic(x, rows, K, w, j0, j1, out, ldo);
}

static void stx_rowmm_bf(const float *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo, int level) {
	int isa = stx_isa() < level ? stx_isa() : level;
	if (isa == 2)
		stx_rowmm_avx512_bf(x, rows, K, w, j0, j1, out, ldo);
	else if (isa == 1)
		stx_rowmm_avx2_bf(x, rows, K, w, j0, j1, out, ldo);
	else
		stx_rowmm_generic_bf(x, rows, K, w, j0, j1, out, ldo);
}

static int stx_rowmm_isa(void) { return stx_isa(); }

// stx_narrow_bf sets dst[i] to src[i] rounded to the nearest bfloat16 (ties to even; NaN kept
// quiet, sign and top of payload kept; overflow to ±Inf): the rounding of cpu.RoundBF16. A
// plain loop GCC vectorises, built for AVX-512 too.
static inline unsigned short stx_round_bf(unsigned int b) {
	unsigned int r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
	unsigned int q = (b | 0x00400000u) >> 16;
	return (unsigned short)((b & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static void stx_narrow_bf_generic(unsigned short *restrict dst, const unsigned int *restrict src, long n) {
	for (long i = 0; i < n; i++) dst[i] = stx_round_bf(src[i]);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw")
static void stx_narrow_bf_avx512(unsigned short *restrict dst, const unsigned int *restrict src, long n) {
	for (long i = 0; i < n; i++) dst[i] = stx_round_bf(src[i]);
}
#pragma GCC pop_options

static void stx_narrow_bf(unsigned short *dst, const float *src, long n) {
	if (stx_isa() == 2 && __builtin_cpu_supports("avx512bw"))
		stx_narrow_bf_avx512(dst, (const unsigned int *)src, n);
	else
		stx_narrow_bf_generic(dst, (const unsigned int *)src, n);
}
*/
import "C"

import "unsafe"

// kernelLevels is the number of kernels that rowMatMulSpan's level can select on this CPU
// (1: the scalar code only, 2: also AVX2, 3: also AVX-512).
var kernelLevels = 1 + int(C.stx_rowmm_isa())

// rowMatMulSpan sets out[r·ldo+j] = x_r·w_j for r < rows and j0 ≤ j < j1, where x is
// [rows, k] and w [·, k] (a projection as Hugging Face stores it, [out, in]), with the C
// kernels: the widest the CPU has up to level (kernelScalar, kernelAVX2, kernelBest), all of
// which round alike.
func rowMatMulSpan(out []float32, ldo int, w, x []float32, rows, k, j0, j1 int, level int) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMul(out, ldo, len(w), x, rows, k, j1)
	C.stx_rowmm((*C.float)(unsafe.Pointer(&x[0])), C.int(rows), C.int(k), (*C.float)(unsafe.Pointer(&w[0])),
		C.int(j0), C.int(j1), (*C.float)(unsafe.Pointer(&out[0])), C.int(ldo), C.int(level))
}

// rowMatMulSpanBF16 is rowMatMulSpan with w holding bfloat16 values (bfloat16.BFloat16 bits).
func rowMatMulSpanBF16(out []float32, ldo int, w []uint16, x []float32, rows, k, j0, j1 int, level int) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMul(out, ldo, len(w), x, rows, k, j1)
	C.stx_rowmm_bf((*C.float)(unsafe.Pointer(&x[0])), C.int(rows), C.int(k), (*C.ushort)(unsafe.Pointer(&w[0])),
		C.int(j0), C.int(j1), (*C.float)(unsafe.Pointer(&out[0])), C.int(ldo), C.int(level))
}

// rowNarrowBF16 sets dst[i] to src[i] rounded to the nearest bfloat16, as cpu.RoundBF16 does
// (the bits of cpu.RoundToBF16's values).
func rowNarrowBF16(dst []uint16, src []float32) {
	if len(src) == 0 {
		return
	}
	dst = dst[:len(src)]
	C.stx_narrow_bf((*C.ushort)(unsafe.Pointer(&dst[0])), (*C.float)(unsafe.Pointer(&src[0])), C.long(len(src)))
}
