//go:build cgo && !noopenblas

package runtime

/*
#cgo CFLAGS: -O3 -std=gnu11
#cgo LDFLAGS: -lm
#include <immintrin.h>
#include <math.h>

// The bfloat16 dot-product kernels (see rowmatmul_bf16dot.go for what every output is): tiles
// of VDPBF16PS where the CPU has it, else an emulation of the instruction.

static inline float stx_bd_reduce16(const float *s) {
	float a[8];
	for (int l = 0; l < 8; l++) a[l] = s[l] + s[l + 8];
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// stx_bd_daz is a bfloat16 value as the instruction reads it: denormals are zeros of their sign.
static inline float stx_bd_daz(unsigned short b) {
	union { unsigned int u; float f; } v = {.u = (unsigned int)((b & 0x7f80) ? b : (b & 0x8000)) << 16};
	return v.f;
}

// stx_bd_step is one step of the instruction, s + x·w, for x and w read by stx_bd_daz and s
// never a denormal: fmaf rounds the exact sum once with gradual underflow, which is the
// instruction's result wherever that is above 2⁻¹²⁶ in magnitude, and a zero of the same
// sign below it (a sum that rounds below 2⁻¹²⁶ with gradual underflow is tiny with an
// unbounded exponent too). A result of exactly 2⁻¹²⁶ (tiny or not, depending on bits fmaf
// does not keep) and a NaN (whose payload the instruction picks by its own rules) set *bad:
// the caller has the exact Go code compute those outputs.
static inline float stx_bd_step(float s, float x, float w, int *bad) {
	float r = fmaf(x, w, s);
	float a = fabsf(r);
	*bad |= (a == 0x1p-126f) | (r != r);
	return a < 0x1p-126f ? copysignf(0.0f, r) : r;
}

#define STX_BD_EMU(NAME)                                                                                   \
	static float NAME##_dot(const unsigned short *x, const unsigned short *w, int K, int *bad) {           \
		float s[16] = {0};                                                                                 \
		for (int b = 0; b < K; b += 32) {                                                                  \
			unsigned short xb[32] = {0}, wb[32] = {0};                                                     \
			const unsigned short *xp = x + b, *wp = w + b;                                                 \
			if (K - b < 32) {                                                                              \
				for (int i = 0; i < K - b; i++) xb[i] = xp[i], wb[i] = wp[i];                              \
				xp = xb, wp = wb;                                                                          \
			}                                                                                              \
			for (int l = 0; l < 16; l++) {                                                                 \
				s[l] = stx_bd_step(s[l], stx_bd_daz(xp[2 * l + 1]), stx_bd_daz(wp[2 * l + 1]), bad);      \
				s[l] = stx_bd_step(s[l], stx_bd_daz(xp[2 * l]), stx_bd_daz(wp[2 * l]), bad);              \
			}                                                                                              \
		}                                                                                                  \
		return stx_bd_reduce16(s);                                                                         \
	}                                                                                                      \
	static int NAME(const unsigned short *x, int rows, int K, const unsigned short *w, int j0, int j1,    \
	                float *out, int ldo) {                                                                 \
		int bad = 0;                                                                                       \
		for (int j = j0; j < j1; j++)                                                                      \
			for (int r = 0; r < rows; r++)                                                                 \
				out[(long)r * ldo + j] = NAME##_dot(x + (long)r * K, w + (long)j * K, K, &bad);            \
		return bad;                                                                                        \
	}

STX_BD_EMU(stx_bd_emu_generic)

#pragma GCC push_options
#pragma GCC target("avx2,fma")
STX_BD_EMU(stx_bd_emu_avx2)
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16,avx2,fma")

// stx_bd_reduce512 is stx_bd_reduce16 on the lanes of v: a_l = s_l + s_{l+8}, then lanes l and
// l+4, then 0+2 and 1+3, then the two.
static inline float stx_bd_reduce512(__m512 v) {
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 h = _mm_add_ps(b, _mm_movehl_ps(b, b));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

// STX_BDT(R, C): R input rows times C weight rows, one accumulator per output (its sixteen
// lanes the sixteen partial sums), each weight vector (32 values) loaded once for the R rows,
// R·C + C + 1 ≤ 32 registers; the last block of a row read with a zeroing mask (the
// instruction on zeros: the definition's padding).
#define STX_BDT(R, C)                                                                                      \
	static void stx_bd_##R##_##C(const unsigned short *x, int K, const unsigned short *w, float *out, int ldo) { \
		__m512 acc[R][C];                                                                                  \
		for (int r = 0; r < R; r++)                                                                        \
			for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();                                  \
		int K32 = K & ~31;                                                                                 \
		for (int k = 0; k < K32; k += 32) {                                                                \
			__m512bh wv[C];                                                                                \
			for (int c = 0; c < C; c++) wv[c] = (__m512bh)_mm512_loadu_si512(w + (long)c * K + k);         \
			for (int r = 0; r < R; r++) {                                                                  \
				__m512bh xv = (__m512bh)_mm512_loadu_si512(x + (long)r * K + k);                           \
				for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);           \
			}                                                                                              \
		}                                                                                                  \
		if (K32 < K) {                                                                                     \
			__mmask32 m = (__mmask32)((1ull << (K - K32)) - 1);                                            \
			__m512bh wv[C];                                                                                \
			for (int c = 0; c < C; c++) wv[c] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + (long)c * K + K32); \
			for (int r = 0; r < R; r++) {                                                                  \
				__m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + (long)r * K + K32);                \
				for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);           \
			}                                                                                              \
		}                                                                                                  \
		for (int r = 0; r < R; r++)                                                                        \
			for (int c = 0; c < C; c++) out[(long)r * ldo + c] = stx_bd_reduce512(acc[r][c]);             \
	}

// The tiles of the float32 AVX-512 kernels (rowmatmul_cgo.go): up to four rows, one group in the
// widest tile for its rows; more, groups of four rows by six weight rows.
STX_BDT(1, 1) STX_BDT(1, 6) STX_BDT(1, 8)
STX_BDT(2, 1) STX_BDT(2, 6) STX_BDT(2, 8)
STX_BDT(3, 1) STX_BDT(3, 6)
STX_BDT(4, 1) STX_BDT(4, 5) STX_BDT(4, 6)

typedef void (*stx_bd_fn)(const unsigned short *, int, const unsigned short *, float *, int);

static const stx_bd_fn stx_bd_tiles[4][8] = {
	{stx_bd_1_1, 0, 0, 0, 0, stx_bd_1_6, 0, stx_bd_1_8},
	{stx_bd_2_1, 0, 0, 0, 0, stx_bd_2_6, 0, stx_bd_2_8},
	{stx_bd_3_1, 0, 0, 0, 0, stx_bd_3_6},
	{stx_bd_4_1, 0, 0, 0, stx_bd_4_5, stx_bd_4_6},
};

static const int stx_bd_cw_few[5] = {0, 8, 8, 6, 5};

// stx_bd_avx512: weight columns in the outer loop, so that a tile's weights stay in cache
// while every group of at most four rows of a chunk (about 512 KiB of inputs) passes them.
static void stx_bd_avx512(const unsigned short *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo) {
	int chunk = (512 << 10) / (2 * K) / 4 * 4;
	if (chunk < 4) chunk = 4;
	for (int r0 = 0; r0 < rows; r0 += chunk) {
		int r1 = rows - r0 < chunk ? rows : r0 + chunk;
		int cw = rows <= 4 ? stx_bd_cw_few[rows] : 6;
		for (int j = j0; j < j1;) {
			int c = j1 - j < cw ? 1 : cw;
			for (int r = r0; r < r1; r += 4) {
				int rr = r1 - r < 4 ? r1 - r : 4;
				stx_bd_tiles[rr - 1][c - 1](x + (long)r * K, K, w + (long)j * K, out + (long)r * ldo + j, ldo);
			}
			j += c;
		}
	}
}

// stx_bd_probe runs the instruction once: acc[l] (l < 16) with the pairs x[2l], x[2l+1] and
// w[2l], w[2l+1] (tests compare it with the emulation).
static void stx_bd_probe(float *acc, const unsigned short *x, const unsigned short *w) {
	__m512 a = _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(x), (__m512bh)_mm512_loadu_si512(w));
	_mm512_storeu_ps(acc, a);
}

#pragma GCC pop_options

// stx_bd_level: 2 with AVX512_BF16 (and the AVX512BW masked loads), 1 with AVX2 and FMA (the
// emulation vectorised), 0 without; -1 unknown yet.
static int stx_bd_level = -1;

static int stx_bd_isa(void) {
	if (stx_bd_level < 0) {
		__builtin_cpu_init();
		int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
		int bf = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		         __builtin_cpu_supports("avx512bf16");
		stx_bd_level = bf ? 2 : avx2;
	}
	return stx_bd_level;
}

// stx_bd sets out[r·ldo + j] (r < rows, j0 ≤ j < j1) to the bfloat16 dot product of x_r and
// w_j, with the instruction where the CPU has it and level allows (level ≥ 1), else the
// emulation; it returns non-zero when the emulation left outputs to the exact code.
static int stx_bd(const unsigned short *x, int rows, int K, const unsigned short *w, int j0, int j1, float *out, int ldo, int level) {
	int isa = stx_bd_isa();
	if (isa == 2 && level >= 1) {
		stx_bd_avx512(x, rows, K, w, j0, j1, out, ldo);
		return 0;
	}
	if (isa >= 1)
		return stx_bd_emu_avx2(x, rows, K, w, j0, j1, out, ldo);
	return stx_bd_emu_generic(x, rows, K, w, j0, j1, out, ldo);
}

static int stx_bd_has_instruction(void) { return stx_bd_isa() == 2; }
*/
import "C"

import "unsafe"

// bf16DotLevels is the number of kernels rowMatMulSpanBF16Dot's level can select on this CPU:
// 1, the emulation only; 2, also the instruction (VDPBF16PS).
var bf16DotLevels = 1 + int(C.stx_bd_has_instruction())

// rowMatMulSpanBF16Dot sets out[r·ldo+j] for r < rows and j0 ≤ j < j1 to the bfloat16 dot
// product of x_r and w_j (x [rows, k], w [·, k], both bfloat16 bits; see rowmatmul_bf16dot.go)
// with the instruction where the CPU has it and level is not kernelScalar, else the C
// emulation (and the Go code for the outputs it leaves): the same bits.
func rowMatMulSpanBF16Dot(out []float32, ldo int, w, x []uint16, rows, k, j0, j1 int, level int) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMulBF16Dot(out, ldo, w, x, rows, k, j1)
	if k == 0 {
		rowMatMulSpanBF16DotGo(out, ldo, w, x, rows, k, j0, j1)
		return
	}
	bad := C.stx_bd((*C.ushort)(unsafe.Pointer(&x[0])), C.int(rows), C.int(k), (*C.ushort)(unsafe.Pointer(&w[0])),
		C.int(j0), C.int(j1), (*C.float)(unsafe.Pointer(&out[0])), C.int(ldo), C.int(level))
	if bad != 0 {
		rowMatMulSpanBF16DotGo(out, ldo, w, x, rows, k, j0, j1)
	}
}

// bf16DotInstruction runs VDPBF16PS once on acc (16 values) with the pairs of x and w (32
// values each) and reports true, or reports false where the CPU does not have it.
func bf16DotInstruction(acc []float32, x, w []uint16) bool {
	if bf16DotLevels < 2 {
		return false
	}
	_, _, _ = acc[15], x[31], w[31]
	C.stx_bd_probe((*C.float)(unsafe.Pointer(&acc[0])), (*C.ushort)(unsafe.Pointer(&x[0])), (*C.ushort)(unsafe.Pointer(&w[0])))
	return true
}
