//go:build cgo && !noopenblas

package runtime

/*
#cgo CFLAGS: -O3 -std=gnu11
#cgo LDFLAGS: -lm
#include <immintrin.h>
#include <math.h>

// Every output of stx_rowmm is the same function of its input row and weight row, whatever
// the tile that computes it: eight partial sums s_l = fma chains over k ≡ l (mod 8) below
// K8 = K − K mod 8, reduced as ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)), then the last K mod 8
// products fused in one at a time. The AVX2 tiles keep the eight partial sums in the lanes of
// one register; the generic code keeps them in an array and does the same operations.

static inline float stx_tail(float s, const float *x, const float *w, int k, int K) {
	for (; k < K; k++) s = fmaf(x[k], w[k], s);
	return s;
}

static inline float stx_reduce8(const float *s) {
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static float stx_dot_generic(const float *x, const float *w, int K) {
	float s[8] = {0};
	int K8 = K & ~7;
	for (int k = 0; k < K8; k += 8)
		for (int l = 0; l < 8; l++) s[l] = fmaf(x[k + l], w[k + l], s[l]);
	return stx_tail(stx_reduce8(s), x, w, K8, K);
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
	float s[8] = {0};
	int K8 = K & ~7;
	for (int k = 0; k < K8; k += 8)
		for (int l = 0; l < 8; l++) s[l] = fmaf(x[k + l], stx_bf(w[k + l]), s[l]);
	return stx_tail_bf(stx_reduce8(s), x, w, K8, K);
}

static void stx_rowmm_generic_bf(const float *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo) {
	for (int j = j0; j < j1; j++)
		for (int r = 0; r < rows; r++) out[(long)r * ldo + j] = stx_dot_generic_bf(x + (long)r * K, w + (long)j * K, K);
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")

static inline float stx_reduce_avx2(__m256 a) {
	// Lanes l and l+4, then 0+2 and 1+3, then the two: the order of stx_reduce8.
	__m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 h = _mm_add_ps(v, _mm_movehl_ps(v, v));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

static inline float stx_finish_avx2(__m256 a, const float *x, const float *w, int K8, int K) {
	return stx_tail(stx_reduce_avx2(a), x, w, K8, K);
}

static inline float stx_finish_avx2_bf(__m256 a, const float *x, const unsigned short *w, int K8, int K) {
	return stx_tail_bf(stx_reduce_avx2(a), x, w, K8, K);
}

static inline __m256 stx_load_f32(const float *p) { return _mm256_loadu_ps(p); }

static inline __m256 stx_load_bf(const unsigned short *p) {
	__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// STX_TILE(R, C) computes R input rows times C weight rows: R·C accumulators, each weight
// vector loaded once for the R rows, each input vector once for the C weight rows.
#define STX_TILE_T(NAME, WT, LOAD, FINISH, R, C)                                                        \
	static void NAME(const float *x, int K, const WT *w, float *out, int ldo) {                         \
		__m256 acc[R][C];                                                                               \
		for (int r = 0; r < R; r++)                                                                     \
			for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();                               \
		int K8 = K & ~7;                                                                                \
		for (int k = 0; k < K8; k += 8) {                                                               \
			__m256 wv[C];                                                                               \
			for (int c = 0; c < C; c++) wv[c] = LOAD(w + (long)c * K + k);                              \
			for (int r = 0; r < R; r++) {                                                               \
				__m256 xv = _mm256_loadu_ps(x + (long)r * K + k);                                       \
				for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);          \
			}                                                                                           \
		}                                                                                               \
		for (int r = 0; r < R; r++)                                                                     \
			for (int c = 0; c < C; c++)                                                                 \
				out[(long)r * ldo + c] = FINISH(acc[r][c], x + (long)r * K, w + (long)c * K, K8, K);        \
	}

#define STX_TILE(R, C)                                                                      \
	STX_TILE_T(stx_tile_##R##_##C, float, stx_load_f32, stx_finish_avx2, R, C)              \
	STX_TILE_T(stx_tilebf_##R##_##C, unsigned short, stx_load_bf, stx_finish_avx2_bf, R, C)

STX_TILE(1, 1) STX_TILE(1, 2) STX_TILE(1, 3) STX_TILE(1, 4) STX_TILE(1, 5) STX_TILE(1, 6) STX_TILE(1, 7) STX_TILE(1, 8)
STX_TILE(2, 1) STX_TILE(2, 2) STX_TILE(2, 3)
STX_TILE(3, 1) STX_TILE(3, 2) STX_TILE(3, 3)
STX_TILE(4, 1) STX_TILE(4, 2) STX_TILE(4, 3)

typedef void (*stx_tile_fn)(const float *, int, const float *, float *, int);
typedef void (*stx_tilebf_fn)(const float *, int, const unsigned short *, float *, int);

// stx_tiles[R-1][C-1]: the tiles used (one row: up to 8 weight rows; more: up to 4 rows by 3).
static const stx_tile_fn stx_tiles[4][8] = {
	{stx_tile_1_1, stx_tile_1_2, stx_tile_1_3, stx_tile_1_4, stx_tile_1_5, stx_tile_1_6, stx_tile_1_7, stx_tile_1_8},
	{stx_tile_2_1, stx_tile_2_2, stx_tile_2_3},
	{stx_tile_3_1, stx_tile_3_2, stx_tile_3_3},
	{stx_tile_4_1, stx_tile_4_2, stx_tile_4_3},
};

static const stx_tilebf_fn stx_tilesbf[4][8] = {
	{stx_tilebf_1_1, stx_tilebf_1_2, stx_tilebf_1_3, stx_tilebf_1_4, stx_tilebf_1_5, stx_tilebf_1_6, stx_tilebf_1_7, stx_tilebf_1_8},
	{stx_tilebf_2_1, stx_tilebf_2_2, stx_tilebf_2_3},
	{stx_tilebf_3_1, stx_tilebf_3_2, stx_tilebf_3_3},
	{stx_tilebf_4_1, stx_tilebf_4_2, stx_tilebf_4_3},
};

// STX_DRIVER(NAME, WT, TILES): weight rows in the outer loop: a tile's weights (C·K values)
// stay in cache while every group of input rows passes over them, so the weights stream from
// memory once per chunk of input rows; a chunk (about 512 KiB of inputs, a multiple of 4 rows)
// stays in cache while the weights pass. One row: eight weight rows per tile (eight
// accumulators); more: up to four rows by three.
#define STX_DRIVER(NAME, WT, TILES)                                                                       \
	static void NAME(const float *x, int rows, int K, const WT *w, int j0, int j1, float *out, int ldo) { \
		int C = rows == 1 ? 8 : 3;                                                                        \
		int chunk = (512 << 10) / (4 * K) / 4 * 4;                                                        \
		if (chunk < 4) chunk = 4;                                                                         \
		for (int r0 = 0; r0 < rows; r0 += chunk) {                                                        \
			int r1 = rows - r0 < chunk ? rows : r0 + chunk;                                               \
			for (int j = j0; j < j1; j += C) {                                                            \
				int c = j1 - j < C ? j1 - j : C;                                                          \
				for (int r = r0; r < r1; r += 4) {                                                        \
					int rr = r1 - r < 4 ? r1 - r : 4;                                                     \
					TILES[rr - 1][c - 1](x + (long)r * K, K, w + (long)j * K, out + (long)r * ldo + j, ldo); \
				}                                                                                         \
			}                                                                                             \
		}                                                                                                 \
	}

STX_DRIVER(stx_rowmm_avx2, float, stx_tiles)
STX_DRIVER(stx_rowmm_avx2_bf, unsigned short, stx_tilesbf)

#pragma GCC pop_options

static int stx_rowmm_level = -1;

static int stx_avx2(void) {
	if (stx_rowmm_level < 0) {
		__builtin_cpu_init();
		stx_rowmm_level = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	}
	return stx_rowmm_level;
}

// stx_rowmm sets out[r·ldo + j] = x_r · w_j for r < rows, j0 ≤ j < j1 (x [rows, K], w [·, K]);
// generic: the scalar code (tests). stx_rowmm_bf: w holds bfloat16 values.
static void stx_rowmm(const float *x, int rows, int K, const float *w, int j0, int j1, float *out, int ldo, int generic) {
	if (!generic && stx_avx2())
		stx_rowmm_avx2(x, rows, K, w, j0, j1, out, ldo);
	else
		stx_rowmm_generic(x, rows, K, w, j0, j1, out, ldo);
}

static void stx_rowmm_bf(const float *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo, int generic) {
	if (!generic && stx_avx2())
		stx_rowmm_avx2_bf(x, rows, K, w, j0, j1, out, ldo);
	else
		stx_rowmm_generic_bf(x, rows, K, w, j0, j1, out, ldo);
}
*/
import "C"

import "unsafe"

// rowMatMulSpan sets out[r·ldo+j] = x_r·w_j for r < rows and j0 ≤ j < j1, where x is
// [rows, k] and w [·, k] (a projection as Hugging Face stores it, [out, in]), with the C
// kernels: AVX2 where the CPU has it, else scalar code that rounds the same (generic: always).
func rowMatMulSpan(out []float32, ldo int, w, x []float32, rows, k, j0, j1 int, generic bool) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMul(out, ldo, len(w), x, rows, k, j1)
	C.stx_rowmm((*C.float)(unsafe.Pointer(&x[0])), C.int(rows), C.int(k), (*C.float)(unsafe.Pointer(&w[0])),
		C.int(j0), C.int(j1), (*C.float)(unsafe.Pointer(&out[0])), C.int(ldo), cBool(generic))
}

// rowMatMulSpanBF16 is rowMatMulSpan with w holding bfloat16 values (bfloat16.BFloat16 bits).
func rowMatMulSpanBF16(out []float32, ldo int, w []uint16, x []float32, rows, k, j0, j1 int, generic bool) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMul(out, ldo, len(w), x, rows, k, j1)
	C.stx_rowmm_bf((*C.float)(unsafe.Pointer(&x[0])), C.int(rows), C.int(k), (*C.ushort)(unsafe.Pointer(&w[0])),
		C.int(j0), C.int(j1), (*C.float)(unsafe.Pointer(&out[0])), C.int(ldo), cBool(generic))
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
